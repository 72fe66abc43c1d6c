"""How the runtime loop groups jobs into commits (ADR 0010)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from shoal.runtime.batch import Job
from shoal.runtime.core import Runtime
from tests.conftest import make_settings


class Recorder:
    """Stands in for `Runtime._process`: notes the kinds of the jobs of every batch."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []

    async def __call__(self, batch: list[Job], *, retry_alone: bool) -> None:
        self.batches.append([job.kind for job in batch])


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
    runtime._post("accepted", None)
    await asyncio.sleep(0.05)
    assert recorder.batches == []  # still lingering
    runtime._post("result", None)
    await asyncio.sleep(0.05)
    assert recorder.batches == [["accepted", "result"]]
    runtime.stop()
    await asyncio.wait_for(loop, 1)


async def test_bookkeeping_alone_commits_after_the_linger(tmp_path: Path) -> None:
    """With nothing else coming, bookkeeping is committed once `batch_linger` has passed."""
    runtime, recorder = _runtime(tmp_path, linger=0.1)
    loop = asyncio.create_task(runtime._loop())
    runtime._post("heartbeat", None)
    runtime._post("log", None)
    await asyncio.sleep(0.3)
    assert recorder.batches == [["heartbeat", "log"]]
    runtime.stop()
    await asyncio.wait_for(loop, 1)


async def test_work_that_others_wait_on_never_lingers(tmp_path: Path) -> None:
    """A result (or a submission, a tick…) is committed at once, with whatever is waiting."""
    runtime, recorder = _runtime(tmp_path, linger=1.0)
    loop = asyncio.create_task(runtime._loop())
    runtime._post("result", None)
    await asyncio.sleep(0.05)
    runtime._post("tick", None)
    await asyncio.sleep(0.05)
    assert recorder.batches == [["result"], ["tick"]]
    runtime.stop()
    await asyncio.wait_for(loop, 1)
