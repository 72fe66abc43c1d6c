"""The in-process event bus, and the bounded subscriber queue every bus hands out.

`MemoryBus` fans events out to subscribers in this process. `RedisBus` reuses it for the local
half of its fan-out, so both backends share one definition of order, bounds and `Lagged`.

A subscriber that does not keep up is not allowed to slow the publisher down or to grow without
bound: when its queue is full it is marked lagged, keeps what it already had, and then raises
`Lagged` so the reader re-reads the gap from the store and subscribes again.
"""

from __future__ import annotations

import contextlib
import enum
from collections.abc import AsyncIterator, Sequence

from shoal.bus.base import Lagged
from shoal.errors import Unavailable
from shoal.events import Event
from shoal.mailbox import Mailbox

DEFAULT_QUEUE_SIZE = 10_000
"""Events a subscriber may have unread before it is marked lagged."""


class _State(enum.Enum):
    OPEN = "open"
    LAGGED = "lagged"
    CLOSED = "closed"


class QueueSubscription:
    """One subscriber's bounded queue of events; iterate it to read them in publish order.

    Iteration ends when the bus closes, and raises `Lagged` once everything queued before an
    overflow (or a lost connection) has been read. Either way the subscription is finished:
    open a new one to keep listening.
    """

    def __init__(self, size: int = DEFAULT_QUEUE_SIZE) -> None:
        if size < 1:
            raise ValueError("A subscription queue must hold at least one event.")
        # `None` only wakes a reader blocked on an empty queue after the state changed.
        self._queue: Mailbox[Event | None] = Mailbox(size)
        self._state = _State.OPEN

    @property
    def lagged(self) -> bool:
        """Whether this subscription missed events and its reader must resync from the store."""
        return self._state is _State.LAGGED

    def offer(self, event: Event) -> None:
        """Queue `event` without waiting; on overflow mark the subscription lagged."""
        if self._state is not _State.OPEN:
            return
        if not self._queue.put_nowait(event):
            self.lag()

    def lag(self) -> None:
        """Mark the subscription lagged: its reader gets what is queued, then `Lagged`."""
        self._finish(_State.LAGGED)

    def close(self) -> None:
        """End the subscription: its reader gets what is queued, then iteration stops."""
        self._finish(_State.CLOSED)

    def discard(self) -> None:
        """End the subscription and drop whatever is still queued: nobody will read it."""
        self._state = _State.CLOSED
        self._queue.clear()
        self._queue.put_nowait(None)

    def _finish(self, state: _State) -> None:
        if self._state is not _State.OPEN:
            return
        self._state = state
        # A full queue needs no wake-up: its reader is not blocked and will find the end.
        self._queue.put_nowait(None)

    def __aiter__(self) -> QueueSubscription:
        """Iterate events as they are published."""
        return self

    async def __anext__(self) -> Event:
        """The next event; `Lagged` after an overflow, the end after a close."""
        while True:
            if self._queue.empty() and self._state is not _State.OPEN:
                if self._state is _State.LAGGED:
                    raise Lagged(
                        "This subscriber fell behind the event stream and missed events. "
                        "Re-read events from the store after the last seq you saw, then "
                        "subscribe again."
                    )
                raise StopAsyncIteration
            event = await self._queue.get()
            if event is not None:
                return event


class MemoryBus:
    """An `EventBus` for one process: every subscriber gets every event, in publish order."""

    def __init__(self, *, queue_size: int = DEFAULT_QUEUE_SIZE) -> None:
        self._queue_size = queue_size
        self._subscriptions: set[QueueSubscription] = set()
        self._closed = False

    async def publish(self, events: Sequence[Event]) -> None:
        """Deliver `events` to every current subscriber without waiting for any of them."""
        if self._closed:
            raise Unavailable("The event bus is closed; events can no longer be published.")
        self.deliver(events)

    def deliver(self, events: Sequence[Event]) -> None:
        """Queue `events` for every current subscriber, now; used by `publish` and `RedisBus`."""
        for subscription in list(self._subscriptions):
            for event in events:
                subscription.offer(event)

    def lag_all(self) -> None:
        """Mark every current subscription lagged, e.g. after a gap in an upstream feed."""
        for subscription in self._subscriptions:
            subscription.lag()

    @contextlib.asynccontextmanager
    async def subscribe(self) -> AsyncIterator[QueueSubscription]:
        """A subscription receiving every event published while the context is open.

        After `close()`, the subscription is already ended.
        """
        # No await before `yield`: callers rely on the subscription being registered the
        # moment the context is entered.
        subscription = QueueSubscription(self._queue_size)
        if self._closed:
            subscription.close()
        else:
            self._subscriptions.add(subscription)
        try:
            yield subscription
        finally:
            self._subscriptions.discard(subscription)
            subscription.discard()

    async def ping(self) -> bool:
        """Whether the bus is open."""
        return not self._closed

    async def close(self) -> None:
        """End every subscription; readers get what was queued, then their iteration stops."""
        self._closed = True
        for subscription in self._subscriptions:
            subscription.close()
        self._subscriptions.clear()
