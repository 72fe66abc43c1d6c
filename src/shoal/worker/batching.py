"""Blocking file work batched into few thread hops (ADR 0011).

A worker running many attempts at once would otherwise send every folder creation, file scan
and outbox write to the thread pool on its own: each hop costs a thread wake-up and a fight for
the GIL with the event loop, and many small jobs at once make the filesystem journal the
bottleneck. A `Batcher` runs one function over every item submitted while its previous batch was
in a thread, so a burst of N attempts costs a few hops instead of N, and a lone attempt still
costs exactly one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class Batcher(Generic[T, R]):
    """Runs `fn(items)` in a thread for the items waiting; `fn` returns one outcome per item,
    in order (an `Exception` instance for an item that failed)."""

    def __init__(self, fn: Callable[[list[T]], Sequence[R | Exception]], *,
                 max_items: int = 256, delay: float = 0.0) -> None:
        self._fn = fn
        self._max = max_items
        self._delay = delay  # seconds to wait for more items first (work nobody waits on)
        self._waiting: list[tuple[T, asyncio.Future[R]]] = []
        self._runner: asyncio.Task[None] | None = None

    async def run(self, item: T) -> R:
        """`item`'s outcome, once the batch it joined has run (its error is raised)."""
        done: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._waiting.append((item, done))
        if self._runner is None:
            self._runner = asyncio.get_running_loop().create_task(self._drain())
        return await done

    async def _drain(self) -> None:
        try:
            if self._delay > 0:
                await asyncio.sleep(self._delay)
            while self._waiting:
                batch, self._waiting = self._waiting[:self._max], self._waiting[self._max:]
                items = [item for item, _ in batch]
                try:
                    outcomes: Sequence[R | Exception] = await asyncio.to_thread(self._fn, items)
                except Exception as exc:  # the whole batch failed: every caller learns why
                    outcomes = [exc] * len(batch)
                for (_, done), outcome in zip(batch, outcomes, strict=True):
                    if done.done():  # its caller was cancelled; the work happened anyway
                        continue
                    if isinstance(outcome, Exception):
                        done.set_exception(outcome)
                    else:
                        done.set_result(outcome)
        finally:
            self._runner = None
