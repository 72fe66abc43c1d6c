"""The event loop's watch: a loop held by a blocking call is reported with the line it is held
at, and again once it answers; a loop that answers in time is never reported."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from structlog.testing import capture_logs

from shoal.stalls import LoopWatch, Stall, log_stall


def _held_here(seconds: float) -> None:
    time.sleep(seconds)  # the blocking call under test: it holds the loop's thread


async def test_a_held_loop_is_reported_with_its_line_and_again_once_it_answers() -> None:
    seen: list[Stall] = []
    over = threading.Event()

    def report(stall: Stall) -> None:
        seen.append(stall)
        if stall.over:
            over.set()

    watch = LoopWatch(threshold=0.05, interval=0.01, report=report)
    watch.start()
    try:
        _held_here(0.5)
        assert await asyncio.to_thread(over.wait, 10), "the watch never saw the loop answer"
    finally:
        watch.stop()
    first, last = seen[0], seen[1]  # (a loaded machine may hold the loop again after)
    assert not first.over
    assert first.seconds >= 0.05
    assert first.at.startswith("test_stalls.py:")
    assert first.at.split(" <- ")[0].endswith(" _held_here")  # innermost first
    assert last.over
    assert last.seconds >= 0.4
    assert [s.over for s in seen[:2]] == [False, True]


async def test_a_loop_that_answers_in_time_is_never_reported() -> None:
    seen: list[Stall] = []
    watch = LoopWatch(threshold=5.0, interval=0.01, report=seen.append)
    watch.start()
    try:
        for _ in range(20):  # the watch asks about every 10 ms; the loop keeps answering
            await asyncio.sleep(0.01)
    finally:
        watch.stop()
    assert seen == []


def test_a_stall_goes_to_the_log() -> None:
    with capture_logs() as logs:
        log_stall(Stall(2.51234, "x.py:3 f <- y.py:9 g", over=False))
        log_stall(Stall(3.0, "", over=True))
    assert [(e["event"], e["log_level"]) for e in logs] == [
        ("event_loop.stalled", "warning"), ("event_loop.resumed", "warning")]
    assert logs[0]["seconds"] == 2.512
    assert logs[0]["at"] == "x.py:3 f <- y.py:9 g"
    assert logs[1]["held_seconds"] == 3.0


def test_a_watch_needs_a_positive_threshold() -> None:
    with pytest.raises(ValueError, match="positive"):
        LoopWatch(threshold=0)
