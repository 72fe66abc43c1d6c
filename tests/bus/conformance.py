"""The behaviour every `EventBus` backend must show, written once.

A backend's test module subclasses `BusConformance` and provides a `make_bus` fixture: an async
factory `make_bus(queue_size=...)` that returns a fresh bus and closes it after the test.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import replace
from datetime import UTC, datetime
from typing import Protocol

import pytest

from shoal.bus.base import EventBus, Lagged, Subscription
from shoal.errors import Unavailable
from shoal.events import Event, EventType

TIMEOUT = 5.0
TASK_ID = uuid.UUID("00000000-0000-4000-8000-000000000001")
USER_ID = uuid.UUID("00000000-0000-4000-8000-000000000002")


class MakeBus(Protocol):
    """An async factory of fresh buses, closed by the fixture after the test."""

    async def __call__(self, *, queue_size: int = ...) -> EventBus:
        """A new bus whose subscriptions hold at most `queue_size` unread events."""
        ...


def make_event(seq: int) -> Event:
    """An event with every field set, so a lossy encoding shows up as inequality."""
    return Event(
        seq=seq,
        type=EventType.SUBTASK_UPDATE,
        data={"n": seq, "nested": {"list": [1, "two", None], "ok": True}},
        timestamp=datetime(2025, 1, 2, 3, 4, 5, 678_901, tzinfo=UTC),
        task_id=TASK_ID,
        user_id=USER_ID if seq % 2 else None,
    )


def make_events(*seqs: int) -> list[Event]:
    """One event per sequence number."""
    return [make_event(seq) for seq in seqs]


async def take(subscription: Subscription, count: int) -> list[Event]:
    """The next `count` events of `subscription`, failing the test if they do not come."""
    iterator = aiter(subscription)
    async with asyncio.timeout(TIMEOUT):
        return [await anext(iterator) for _ in range(count)]


async def drain(subscription: Subscription) -> list[Event]:
    """Every event until the subscription ends, failing the test if it does not end."""
    async with asyncio.timeout(TIMEOUT):
        return [event async for event in subscription]


class BusConformance:
    """Tests every backend passes; subclass it and provide `make_bus`."""

    @pytest.fixture
    async def bus(self, make_bus: MakeBus) -> EventBus:
        """A fresh bus with the default queue size."""
        return await make_bus()

    async def test_delivers_events_in_publish_order(self, bus: EventBus) -> None:
        """A subscriber receives every event, unchanged, in the order published."""
        async with bus.subscribe() as subscription:
            await bus.publish(make_events(1, 2, 3))
            await bus.publish(make_events(4))
            await bus.publish(make_events(5, 6))
            assert await take(subscription, 6) == make_events(1, 2, 3, 4, 5, 6)

    async def test_fans_out_to_every_subscriber(self, bus: EventBus) -> None:
        """Two subscribers each receive every event."""
        async with bus.subscribe() as first, bus.subscribe() as second:
            await bus.publish(make_events(1, 2))
            assert await take(first, 2) == make_events(1, 2)
            assert await take(second, 2) == make_events(1, 2)

    async def test_publishing_nothing_delivers_nothing(self, bus: EventBus) -> None:
        """An empty publish is allowed and sends no event."""
        async with bus.subscribe() as subscription:
            await bus.publish([])
            await bus.publish(make_events(1))
            assert await take(subscription, 1) == make_events(1)

    async def test_no_delivery_after_unsubscribe(self, bus: EventBus) -> None:
        """A subscription whose context has exited receives nothing more."""
        async with bus.subscribe() as staying:
            async with bus.subscribe() as leaving:
                pass
            await bus.publish(make_events(1))
            # Delivery to `staying` proves the event went through the fan-out.
            assert await take(staying, 1) == make_events(1)
        assert await drain(leaving) == []

    async def test_overflow_yields_queued_events_then_lagged(self, make_bus: MakeBus) -> None:
        """A subscriber whose queue overflows gets what it had, then `Lagged`."""
        bus = await make_bus(queue_size=2)
        async with bus.subscribe() as subscription:
            await bus.publish(make_events(1, 2, 3, 4, 5))
            assert await take(subscription, 2) == make_events(1, 2)
            with pytest.raises(Lagged):
                await take(subscription, 1)

    async def test_lagging_subscriber_does_not_disturb_others(self, make_bus: MakeBus) -> None:
        """One subscriber overflowing leaves a subscriber that keeps up untouched."""
        bus = await make_bus(queue_size=2)
        async with bus.subscribe() as slow, bus.subscribe() as fast:
            await bus.publish(make_events(1, 2))
            assert await take(fast, 2) == make_events(1, 2)
            await bus.publish(make_events(3))
            assert await take(fast, 1) == make_events(3)
            assert await take(slow, 2) == make_events(1, 2)
            with pytest.raises(Lagged):
                await take(slow, 1)

    async def test_take_gives_what_queued_in_order_at_most_limit(
        self, make_bus: MakeBus
    ) -> None:
        """`take` returns the events queued so far in publish order, at most `limit` at a time,
        then after an overflow what was queued before it and `Lagged`."""
        bus = await make_bus(queue_size=4)
        async with bus.subscribe() as subscription:
            await bus.publish(make_events(1, 2, 3))
            async with asyncio.timeout(TIMEOUT):
                assert await subscription.take(2) == make_events(1, 2)  # one publish: together
                assert await subscription.take(10) == make_events(3)
                await bus.publish(make_events(4, 5, 6, 7, 8))
                assert await subscription.take(10) == make_events(4, 5, 6, 7)
                with pytest.raises(Lagged):
                    await subscription.take(10)

    async def test_a_subscription_routed_to_a_task_gets_only_its_events(
        self, bus: EventBus
    ) -> None:
        """Routed to a task, a subscription receives that task's events in order and no
        other's; one not routed still receives them all."""
        other = uuid.UUID("00000000-0000-4000-8000-000000000003")
        mixed = [replace(e, task_id=other) if e.seq % 2 else e for e in make_events(1, 2, 3, 4)]
        async with bus.subscribe(TASK_ID) as mine, bus.subscribe(other) as theirs, \
                bus.subscribe() as everything:
            await bus.publish(mixed)
            await bus.publish(make_events(5))
            assert await take(mine, 3) == [mixed[1], mixed[3], make_event(5)]
            assert await take(theirs, 2) == [mixed[0], mixed[2]]
            assert await take(everything, 5) == [*mixed, make_event(5)]
            # Nothing was missed: a backend may doubt no number past the one before the last
            # it delivered (a reader at that one checks the store for nothing).
            assert (mine.gap_through <= 4, theirs.gap_through <= 1) == (True, True)

    async def test_take_ends_with_nothing_once_the_bus_closed(self, bus: EventBus) -> None:
        """After `close()`, `take` returns what was queued, then an empty list."""
        async with bus.subscribe() as subscription:
            await bus.publish(make_events(1))
            assert await take(subscription, 1) == make_events(1)
            await bus.close()
            async with asyncio.timeout(TIMEOUT):
                assert await subscription.take(5) == []

    async def test_close_ends_a_waiting_reader(self, bus: EventBus) -> None:
        """`close()` wakes a reader blocked on an empty queue and ends its iteration."""
        received: asyncio.Queue[Event] = asyncio.Queue()

        async def read(subscription: Subscription) -> list[Event]:
            events = []
            async for event in subscription:
                events.append(event)
                received.put_nowait(event)
            return events

        async with bus.subscribe() as subscription, asyncio.TaskGroup() as tasks:
            reader = tasks.create_task(read(subscription))
            await bus.publish(make_events(1))
            async with asyncio.timeout(TIMEOUT):
                await received.get()  # the reader now waits for a second event
                await bus.close()
                assert await reader == make_events(1)

    async def test_subscription_opened_after_close_is_ended(self, bus: EventBus) -> None:
        """Subscribing to a closed bus gives a subscription that is already over."""
        await bus.close()
        async with bus.subscribe() as subscription:
            assert await drain(subscription) == []

    async def test_publish_after_close_is_refused(self, bus: EventBus) -> None:
        """Publishing on a closed bus raises `Unavailable` instead of dropping events."""
        await bus.close()
        with pytest.raises(Unavailable):
            await bus.publish(make_events(1))

    async def test_close_is_idempotent(self, bus: EventBus) -> None:
        """Closing twice is harmless."""
        await bus.close()
        await bus.close()
