"""Watching a process's event loop for stalls.

One blocking call on the loop (a synchronous read, a lock held by a thread, a library that does
not yield) stops every request, stream and worker socket of the process at once, and from
outside it looks like a slow network. `LoopWatch` is a thread that asks the loop to answer
every `interval` seconds; when it has not answered within `threshold`, it reports where the
loop's thread is (`event_loop.stalled`, with the innermost frames of its stack on one line:
`stalls.py:40 held <- app.py:12 handler <- …`), and once the loop answers again, how long it was
held (`event_loop.resumed`).
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import structlog

log = structlog.get_logger(__name__)
FRAMES = 12  # the innermost frames of the loop thread's stack a report shows


@dataclass(frozen=True, slots=True)
class Stall:
    """The loop has not answered for `seconds` (`over`: it has answered since, after that long;
    `at`: where its thread was when the stall was seen, innermost frame first)."""

    seconds: float
    at: str
    over: bool


def log_stall(stall: Stall) -> None:
    """Report a stall in the process's log."""
    if stall.over:
        log.warning("event_loop.resumed", held_seconds=round(stall.seconds, 3))
    else:
        log.warning("event_loop.stalled", seconds=round(stall.seconds, 3), at=stall.at)


class LoopWatch:
    """A daemon thread watching the running loop; `start` on the loop's thread, `stop` on any."""

    def __init__(self, *, threshold: float, interval: float = 1.0,
                 report: Callable[[Stall], None] = log_stall) -> None:
        if threshold <= 0 or interval <= 0:
            raise ValueError("A loop watch needs a positive threshold and interval.")
        self.threshold, self.interval, self.report = threshold, interval, report
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Watch the loop running on this thread."""
        loop, ident = asyncio.get_running_loop(), threading.get_ident()
        self._thread = threading.Thread(target=self._watch, args=(loop, ident), daemon=True,
                                        name="shoal-loop-watch")
        self._thread.start()

    def stop(self) -> None:
        """Stop watching (the thread ends within one `interval`)."""
        self._stop.set()

    def _watch(self, loop: asyncio.AbstractEventLoop, ident: int) -> None:
        while not self._stop.wait(self.interval):
            answered = threading.Event()
            asked = time.monotonic()
            try:
                loop.call_soon_threadsafe(answered.set)
            except RuntimeError:  # the loop is closed
                return
            if answered.wait(self.threshold):
                continue
            at = where(sys._current_frames().get(ident))
            self.report(Stall(time.monotonic() - asked, at, over=False))
            while not answered.wait(self.interval):
                if self._stop.is_set():
                    return
            self.report(Stall(time.monotonic() - asked, at, over=True))


def where(frame: FrameType | None) -> str:
    """`frame`'s innermost `FRAMES` frames on one line, innermost first."""
    if frame is None:
        return ""
    return " <- ".join(f"{Path(f.filename).name}:{f.lineno} {f.name}"
                       for f in reversed(traceback.extract_stack(frame, limit=FRAMES)))
