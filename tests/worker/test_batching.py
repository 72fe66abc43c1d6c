"""`Batcher`: one thread job for every item that arrives while the previous job runs."""

from __future__ import annotations

import asyncio
import threading

import pytest

from shoal.worker.batching import Batcher


async def test_a_burst_shares_few_jobs_and_each_caller_gets_its_own_outcome() -> None:
    """Items submitted together run together; a failed item fails only its own caller."""
    jobs: list[list[int]] = []
    started = threading.Event()
    entered = threading.Event()

    def double(items: list[int]) -> list[int | Exception]:
        jobs.append(items)
        entered.set()
        started.wait(5)  # hold the first job so the rest pile up behind it
        return [ValueError(f"no {i}") if i == 3 else i * 2 for i in items]

    batcher: Batcher[int, int] = Batcher(double)
    first = asyncio.create_task(batcher.run(0))
    assert await asyncio.to_thread(entered.wait, 5)  # the first job is in its thread
    rest = [asyncio.create_task(batcher.run(i)) for i in range(1, 6)]
    started.set()
    assert await first == 0
    outcomes = await asyncio.gather(*rest, return_exceptions=True)
    assert outcomes[:2] == [2, 4]
    assert isinstance(outcomes[2], ValueError)
    assert outcomes[3:] == [8, 10]
    assert jobs == [[0], [1, 2, 3, 4, 5]]


async def test_a_job_that_raises_fails_every_caller_in_it() -> None:
    """An exception from the whole job reaches each waiting caller."""

    def broken(items: list[int]) -> list[int | Exception]:
        raise OSError("disk gone")

    batcher: Batcher[int, int] = Batcher(broken)
    with pytest.raises(OSError, match="disk gone"):
        await batcher.run(1)
