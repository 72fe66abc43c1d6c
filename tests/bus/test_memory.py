"""The in-process bus passes the bus conformance suite, plus its own queue details."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from shoal.bus.base import EventBus, Lagged
from shoal.bus.memory import DEFAULT_QUEUE_SIZE, MemoryBus, QueueSubscription
from tests.bus.conformance import (
    TASK_ID,
    BusConformance,
    MakeBus,
    drain,
    make_events,
    take,
)


class TestMemoryBus(BusConformance):
    """`MemoryBus` against the shared conformance suite."""

    @pytest.fixture
    async def make_bus(self) -> AsyncIterator[MakeBus]:
        """Fresh `MemoryBus`es, closed after the test."""
        buses: list[MemoryBus] = []

        async def make(*, queue_size: int = DEFAULT_QUEUE_SIZE) -> EventBus:
            buses.append(MemoryBus(queue_size=queue_size))
            return buses[-1]

        yield make
        for bus in buses:
            await bus.close()


async def test_lag_all_marks_every_open_subscription() -> None:
    """`lag_all` ends every open subscription with `Lagged` after its queued events."""
    bus = MemoryBus()
    async with bus.subscribe() as first, bus.subscribe() as second:
        await bus.publish(make_events(1))
        bus.lag_all()
        await bus.publish(make_events(2))
        for subscription in (first, second):
            assert await take(subscription, 1) == make_events(1)
            with pytest.raises(Lagged):
                await take(subscription, 1)


async def test_lagged_subscription_keeps_raising() -> None:
    """Once lagged, every further read raises `Lagged` again."""
    subscription = QueueSubscription(1)
    subscription.lag()
    for _ in range(2):
        with pytest.raises(Lagged):
            await take(subscription, 1)
    assert subscription.lagged


async def test_close_keeps_events_already_queued() -> None:
    """A reader still gets the events queued before `close()`, then the end."""
    bus = MemoryBus()
    async with bus.subscribe() as subscription:
        await bus.publish(make_events(1, 2))
        await bus.close()
        assert await drain(subscription) == make_events(1, 2)


def test_queue_size_must_be_positive() -> None:
    """A subscription that could hold nothing is refused."""
    with pytest.raises(ValueError, match="at least one"):
        QueueSubscription(0)


async def test_a_gap_in_the_numbers_is_told_to_routed_subscriptions() -> None:
    """An event numbered past the highest seen plus one raises `gap_through` of every routed
    subscription to just below it: the numbers between may never come (another task's, or
    lost). A subscription that missed nothing is told of no gap."""
    bus, other = MemoryBus(), uuid.UUID("00000000-0000-4000-8000-000000000003")
    async with bus.subscribe(TASK_ID) as mine, bus.subscribe(other) as theirs:
        await bus.publish(make_events(1, 2))
        assert (mine.gap_through, theirs.gap_through) == (0, 0)
        await bus.publish(make_events(6))
        assert await take(mine, 3) == make_events(1, 2, 6)
        assert (mine.gap_through, theirs.gap_through) == (5, 5)
