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
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from typing import cast

from shoal.bus.base import Lagged
from shoal.errors import Unavailable
from shoal.events import Event
from shoal.mailbox import Mailbox

DEFAULT_QUEUE_SIZE = 10_000
"""Events a subscriber may have unread before it is marked lagged."""
LAGGED = ("This subscriber fell behind the event stream and missed events. Re-read events "
          "from the store after the last seq you saw, then subscribe again.")


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
        self.gap_through = 0  # a routed subscription: events up to this seq may be missing
        # The reader's own taker, called by the publisher while nothing is queued (`Subscription`)
        self.inline: Callable[[Sequence[Event]], bool] | None = None

    def empty(self) -> bool:
        """Whether nothing is queued: every event delivered so far has been taken."""
        return self._queue.empty()

    @property
    def lagged(self) -> bool:
        """Whether this subscription missed events and its reader must resync from the store."""
        return self._state is _State.LAGGED

    def offer(self, event: Event) -> None:
        """Queue `event` without waiting; on overflow mark the subscription lagged."""
        if self._state is not _State.OPEN:
            return
        if self.inline is not None and self._queue.empty() and self.inline((event,)):
            return
        if not self._queue.put_nowait(event):
            self.lag()

    def offer_all(self, events: Sequence[Event]) -> None:
        """`offer` each of `events`, in order."""
        if self._state is not _State.OPEN:
            return
        if self.inline is not None and self._queue.empty() and self.inline(events):
            return
        if self._queue.put_all(events) < len(events):
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

    async def take(self, limit: int) -> list[Event]:
        """The events queued now, in order (at most `limit`; waiting for the first if there is
        none); `[]` once the bus closed, `Lagged` after an overflow, each once everything queued
        before it was taken. One wake-up of the reader for a burst, not one per event."""
        queue = self._queue
        while True:
            if queue.empty() and self._state is not _State.OPEN:
                if self._state is _State.LAGGED:
                    raise Lagged(LAGGED)
                return []
            first = await queue.get()
            if first is None:
                continue
            if queue.empty() or limit <= 1:
                return [first]
            events = queue.take_nowait(limit - 1)
            if self._state is not _State.OPEN:  # a wake-up (None) may be among them
                events = [event for event in events if event is not None]
            events.insert(0, first)
            return cast("list[Event]", events)  # (None comes only after the state changed)

    def __aiter__(self) -> QueueSubscription:
        """Iterate events as they are published."""
        return self

    async def __anext__(self) -> Event:
        """The next event; `Lagged` after an overflow, the end after a close."""
        while True:
            if self._queue.empty() and self._state is not _State.OPEN:
                if self._state is _State.LAGGED:
                    raise Lagged(LAGGED)
                raise StopAsyncIteration
            event = await self._queue.get()
            if event is not None:
                return event


class MemoryBus:
    """An `EventBus` for one process: every subscriber gets every event, in publish order; a
    subscriber routed to one task gets only that task's events.

    A routed subscriber cannot tell a gap in the log's order from its own events' numbers
    (other tasks' events lie between them), so the bus tells it: when an event arrives whose
    number is past the highest seen plus one, the numbers between may come later or never
    (their publish failed, or another copy's events are late) and every routed subscription's
    `gap_through` is raised to just below it; its reader fills the gap from the store.
    """

    def __init__(self, *, queue_size: int = DEFAULT_QUEUE_SIZE) -> None:
        self._queue_size = queue_size
        self._subscriptions: set[QueueSubscription] = set()
        # By the task id's number: an event's id and a subscriber's may be different objects,
        # and `uuid.UUID.__eq__` is a Python call where an int's is not.
        self._by_task: dict[int, set[QueueSubscription]] = {}
        self._high = 0  # the highest sequence number delivered
        self._closed = False

    async def publish(self, events: Sequence[Event]) -> None:
        """Deliver `events` to every current subscriber without waiting for any of them."""
        if self._closed:
            raise Unavailable("The event bus is closed; events can no longer be published.")
        self.deliver(events)

    def deliver(self, events: Sequence[Event]) -> None:
        """Queue `events` for every current subscriber, now; used by `publish` and `RedisBus`."""
        if self._by_task:
            self._route(events)
        else:
            self._note_gaps(events)
        self.deliver_unrouted(events)

    def deliver_unrouted(self, events: Sequence[Event]) -> None:
        """Queue `events` for the subscriptions that follow every event (a `RedisBus` hears
        them on the deployment's channel)."""
        for subscription in list(self._subscriptions):
            subscription.offer_all(events)

    def deliver_routed(self, task_id: uuid.UUID, events: Sequence[Event], gap: int) -> None:
        """Queue task `task_id`'s `events` for the subscriptions routed to it, telling them
        that the task's events numbered up to `gap` may be missing (a `RedisBus` hears them
        on the task's channel, which says which number came before)."""
        for subscription in list(self._by_task.get(task_id.int, ())):
            if gap > subscription.gap_through:
                subscription.gap_through = gap
            subscription.offer_all(events)

    def _note_gaps(self, events: Sequence[Event]) -> int:
        """Track the highest number seen; the top of a gap `events` open, or 0."""
        high, gap = self._high, 0
        for event in events:
            seq = event.seq
            if seq > high:
                if high and seq > high + 1:
                    gap = seq - 1
                high = seq
        self._high = high
        return gap

    def _route(self, events: Sequence[Event]) -> None:
        """Queue each event for the subscriptions routed to its task (in order, per task)."""
        if gap := self._note_gaps(events):
            for routed in self._by_task.values():
                for subscription in routed:
                    subscription.gap_through = max(subscription.gap_through, gap)
        by_task = self._by_task
        groups: dict[int, list[Event]] = {}
        for event in events:
            tid = event.task_id
            if tid is not None and (key := tid.int) in by_task:
                groups.setdefault(key, []).append(event)
        for key, group in groups.items():
            for subscription in list(by_task.get(key, ())):
                subscription.offer_all(group)

    def _every_subscription(self) -> list[QueueSubscription]:
        return [*self._subscriptions, *(s for routed in self._by_task.values() for s in routed)]

    def lag_all(self) -> None:
        """Mark every current subscription lagged, e.g. after a gap in an upstream feed."""
        for subscription in self._every_subscription():
            subscription.lag()

    @contextlib.asynccontextmanager
    async def subscribe(
        self, task_id: uuid.UUID | None = None
    ) -> AsyncIterator[QueueSubscription]:
        """A subscription receiving every event published while the context is open (only
        task `task_id`'s, if given). After `close()`, the subscription is already ended.
        """
        # No await before `yield`: callers rely on the subscription being registered the
        # moment the context is entered.
        subscription = QueueSubscription(self._queue_size)
        group = self._subscriptions if task_id is None else self._by_task.setdefault(
            task_id.int, set())
        if self._closed:
            subscription.close()
        else:
            group.add(subscription)
        try:
            yield subscription
        finally:
            group.discard(subscription)
            if task_id is not None and not group:
                self._by_task.pop(task_id.int, None)
            subscription.discard()

    async def ping(self) -> bool:
        """Whether the bus is open."""
        return not self._closed

    async def close(self) -> None:
        """End every subscription; readers get what was queued, then their iteration stops."""
        self._closed = True
        for subscription in self._every_subscription():
            subscription.close()
        self._subscriptions.clear()
        self._by_task.clear()
