"""How the runtime loop groups jobs into commits (ADR 0010).

No test here sleeps to synchronise: "nothing committed yet" is checked after letting the loop
run many times while a long linger cannot have expired, and "committed" is awaited on an event
the stand-in for `_process` sets.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

from shoal.runtime.core import Runtime
from shoal.runtime.jobs import Accepted, Beat, Job, Log, Result, Tick
from tests.conftest import make_settings

DEADLINE = 5.0
NONE: Any = None  # what the loop itself never reads: it hands jobs to `_process`


class Recorder:
    """Stands in for `Runtime._process`: notes the kinds of the jobs of every batch."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.changed = asyncio.Event()

    async def __call__(self, batch: list[Job], *, retry_alone: bool, races: int) -> None:
        self.batches.append([type(job).__name__ for job in batch])
        self.changed.set()

    async def wait_for(self, count: int) -> None:
        """Until `count` batches were processed."""
        async with asyncio.timeout(DEADLINE):
            while len(self.batches) < count:
                self.changed.clear()
                await self.changed.wait()


async def _let_loop_run() -> None:
    """Give the runtime loop many turns (no time passes worth speaking of)."""
    for _ in range(50):
        await asyncio.sleep(0)


def _runtime(tmp_path: Path, linger: float) -> tuple[Runtime, Recorder]:
    settings = make_settings(tmp_path, batch_linger=linger)
    none: Any = None  # the loop itself touches neither the store nor the bus
    runtime = Runtime(settings, none, none, none)
    recorder = Recorder()
    runtime._process = recorder  # type: ignore[method-assign]
    return runtime, recorder


async def test_bookkeeping_waits_for_the_result_that_follows(tmp_path: Path) -> None:
    """`task_accepted` alone waits (at most `batch_linger`) and shares the result's commit."""
    runtime, recorder = _runtime(tmp_path, linger=1.0)
    loop = asyncio.create_task(runtime._loop())
    runtime._post(Accepted(None, uuid.uuid4()))
    await _let_loop_run()
    assert recorder.batches == []  # still lingering: a second cannot have passed
    runtime._post(Result(NONE, NONE, [], []))
    await recorder.wait_for(1)
    assert recorder.batches == [["Accepted", "Result"]]
    runtime.stop()
    await asyncio.wait_for(loop, DEADLINE)


async def test_bookkeeping_alone_commits_after_the_linger(tmp_path: Path) -> None:
    """With nothing else coming, bookkeeping is committed once `batch_linger` has passed."""
    runtime, recorder = _runtime(tmp_path, linger=0.1)
    clock = asyncio.get_running_loop().time
    loop = asyncio.create_task(runtime._loop())
    posted = clock()
    runtime._post(Accepted(None, uuid.uuid4()))
    runtime._post(Log(None, NONE))
    await recorder.wait_for(1)
    assert clock() - posted >= 0.1 * 0.9  # the loop's timer may fire a hair early
    assert recorder.batches == [["Accepted", "Log"]]
    runtime.stop()
    await asyncio.wait_for(loop, DEADLINE)


async def test_work_that_others_wait_on_never_lingers(tmp_path: Path) -> None:
    """A result (or a submission, a tick, a heartbeat…) is committed at once, with whatever is
    waiting."""
    runtime, recorder = _runtime(tmp_path, linger=1.0)
    loop = asyncio.create_task(runtime._loop())
    runtime._post(Result(NONE, NONE, [], []))
    await _let_loop_run()  # committed within a few turns, not after the linger
    assert recorder.batches == [["Result"]]
    runtime._post(Tick())
    await _let_loop_run()
    assert recorder.batches == [["Result"], ["Tick"]]
    runtime._post(Beat(NONE, NONE))  # a heartbeat too: its handling time is a target (≤ 5 ms)
    await _let_loop_run()
    assert recorder.batches == [["Result"], ["Tick"], ["Beat"]]
    runtime.stop()
    await asyncio.wait_for(loop, DEADLINE)
