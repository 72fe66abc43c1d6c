"""A bounded first-in-first-out queue for one writer and one reader, lighter than `asyncio.Queue`.

Every watching client holds two queues for as long as its socket is open (its bus subscription
and its stream's pump). An `asyncio.Queue` is four deques (its items, its getters, its putters
and the `Event` behind `join`), about 3 kB empty; a `Mailbox` is one deque and a future only
while someone waits, under 1 kB. It does only what those two need: `put` waits while full,
`get` while empty, each side has at most one waiter at a time. The runtime's inbox and a worker
socket's outgoing frames use one too, unbounded (`UNBOUNDED`): many put without waiting
(`put_nowait`), one task gets.
"""

from __future__ import annotations

import asyncio
import sys
from collections import deque
from collections.abc import Sequence
from typing import Generic, TypeVar

T = TypeVar("T")
UNBOUNDED = sys.maxsize  # a size no queue reaches: `put_nowait` always queues


class Mailbox(Generic[T]):
    """At most `size` items in order; one task puts (any number with `put_nowait`), one task
    gets."""

    __slots__ = ("_getter", "_items", "_putter", "_size")

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError("A mailbox must hold at least one item.")
        self._items: deque[T] = deque()
        self._size = size
        self._getter: asyncio.Future[None] | None = None  # the reader, waiting for an item
        self._putter: asyncio.Future[None] | None = None  # the writer, waiting for room

    def empty(self) -> bool:
        """Whether nothing is waiting to be read."""
        return not self._items

    def full(self) -> bool:
        """Whether `put` would wait (and `put_nowait` refuse)."""
        return len(self._items) >= self._size

    def put_nowait(self, item: T) -> bool:
        """Queue `item` unless the mailbox is full; whether it was queued."""
        if len(self._items) >= self._size:
            return False
        self._items.append(item)
        getter = self._getter  # `_wake`, inline: a call less per item
        if getter is not None and not getter.done():
            getter.set_result(None)
        return True

    def put_all(self, items: Sequence[T]) -> int:
        """Queue as many of `items`, in order, as there is room for, without waiting; how many
        (all of them unless the mailbox filled up). One call for a burst, not one per item."""
        queued = self._items
        room = self._size - len(queued)
        if room <= 0 or not items:
            return 0
        if len(items) > room:
            items = items[:room]
        queued.extend(items)
        getter = self._getter
        if getter is not None and not getter.done():
            getter.set_result(None)
        return len(items)

    async def put(self, item: T) -> None:
        """Queue `item`, waiting for room first if the mailbox is full."""
        while len(self._items) >= self._size:
            self._putter = asyncio.get_running_loop().create_future()
            try:
                await self._putter
            finally:
                self._putter = None
        self.put_nowait(item)

    def get_nowait(self) -> T:
        """The oldest item; `IndexError` if there is none."""
        item = self._items.popleft()
        if self._putter is not None:
            _wake(self._putter)
        return item

    async def get(self) -> T:
        """The oldest item, waiting for one first if there is none. Cancelling the wait loses
        nothing: an item is taken only when it is returned."""
        while not self._items:
            self._getter = asyncio.get_running_loop().create_future()
            try:
                await self._getter
            finally:
                self._getter = None
        item = self._items.popleft()  # `get_nowait`, inline: a call less per item
        if self._putter is not None:
            _wake(self._putter)
        return item

    def take_nowait(self, limit: int) -> list[T]:
        """The oldest items, at most `limit`, in order (none if there is none)."""
        queued = self._items
        if len(queued) <= limit:
            items = list(queued)
            queued.clear()
        else:
            pop = queued.popleft
            items = [pop() for _ in range(limit)]
        if items and self._putter is not None:
            _wake(self._putter)
        return items

    def clear(self) -> None:
        """Drop every queued item."""
        self._items.clear()
        _wake(self._putter)


def _wake(waiter: asyncio.Future[None] | None) -> None:
    if waiter is not None and not waiter.done():
        waiter.set_result(None)
