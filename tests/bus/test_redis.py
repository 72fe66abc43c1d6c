"""The Redis bus passes the bus conformance suite and survives a dropped connection.

Needs a real Redis (`SHOAL_TEST_REDIS_URL`, default redis://127.0.0.1:6379/0). Without one the
tests are skipped with the reason shown, except under `CI=true`, where they fail.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from shoal.bus import keys
from shoal.bus.base import EventBus, Lagged
from shoal.bus.memory import DEFAULT_QUEUE_SIZE
from shoal.bus.redis import RedisBus, decode_events, encode_events
from shoal.errors import Unavailable
from shoal.events import Event
from tests.bus.conformance import TIMEOUT, BusConformance, MakeBus, drain, make_events, take

pytestmark = pytest.mark.redis


@pytest.fixture
async def admin(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    """A plain client to poke Redis from the outside."""
    client = aioredis.Redis.from_url(redis_url)
    yield client
    await client.aclose()


@pytest.fixture
def channel() -> str:
    """A channel no other test (or program) uses."""
    return f"{keys.EVENTS_CHANNEL}:test:{uuid.uuid4().hex}"


@pytest.fixture
def client_name() -> str:
    """A connection name that lets a test find this bus's connections in CLIENT LIST."""
    return f"shoal-test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
async def make_bus(redis_url: str, channel: str, client_name: str) -> AsyncIterator[MakeBus]:
    """Fresh `RedisBus`es on this test's channel, closed after the test."""
    buses: list[RedisBus] = []

    async def make(*, queue_size: int = DEFAULT_QUEUE_SIZE) -> EventBus:
        buses.append(
            RedisBus(redis_url, channel=channel, queue_size=queue_size, client_name=client_name)
        )
        return buses[-1]

    yield make
    for bus in buses:
        await bus.close()


class TestRedisBus(BusConformance):
    """`RedisBus` against the shared conformance suite."""


async def kill_listener(admin: aioredis.Redis, client_name: str) -> None:
    """Drop the pub/sub connection of the bus named `client_name`, as a network failure would."""
    clients = await admin.client_list()
    ids = [c["id"] for c in clients if c["name"] == client_name and "P" in c["flags"]]
    assert ids, f"no pub/sub connection named {client_name}"
    for client_id in ids:
        await admin.client_kill_filter(_id=client_id)


async def test_two_buses_on_one_channel_see_each_others_events(make_bus: MakeBus) -> None:
    """An event published on one control-plane copy reaches subscribers on another."""
    here, there = await make_bus(), await make_bus()
    async with here.subscribe() as near, there.subscribe() as far:
        await here.publish(make_events(1, 2))
        assert await take(far, 2) == make_events(1, 2)
        assert await take(near, 2) == make_events(1, 2)


async def test_dropped_connection_lags_every_subscription(
    make_bus: MakeBus, admin: aioredis.Redis, client_name: str
) -> None:
    """When Redis drops the listener's connection, every open subscription gets `Lagged`."""
    bus = await make_bus()
    async with bus.subscribe() as first, bus.subscribe() as second:
        await kill_listener(admin, client_name)
        for subscription in (first, second):
            with pytest.raises(Lagged):
                await take(subscription, 1)


async def test_subscribing_works_again_after_reconnect(
    make_bus: MakeBus, admin: aioredis.Redis, client_name: str
) -> None:
    """After the listener reconnects, a new subscription receives new events."""
    bus = await make_bus()
    async with bus.subscribe() as before:
        await kill_listener(admin, client_name)
        with pytest.raises(Lagged):
            await take(before, 1)
    async with bus.subscribe() as after:
        await bus.publish(make_events(7))
        assert await take(after, 1) == make_events(7)


async def test_undecodable_message_lags_subscribers(
    make_bus: MakeBus, admin: aioredis.Redis, channel: str
) -> None:
    """A message that is not a list of events makes subscribers resync instead of guessing."""
    bus = await make_bus()
    async with bus.subscribe() as subscription:
        await admin.publish(channel, b'{"not": "events"}')
        with pytest.raises(Lagged):
            await take(subscription, 1)


async def test_unreachable_redis_refuses_to_subscribe() -> None:
    """Subscribing when Redis cannot be reached raises `Unavailable` naming the server."""
    bus = RedisBus("redis://:secret@127.0.0.1:1/0", connect_timeout=0.3)
    try:
        with pytest.raises(Unavailable, match=r"127\.0\.0\.1:1") as caught:
            async with bus.subscribe():
                pass
        assert "secret" not in caught.value.message
    finally:
        await bus.close()


async def test_close_releases_a_subscriber_waiting_for_redis() -> None:
    """A subscriber still waiting for an unreachable Redis gets an ended subscription on close."""
    bus = RedisBus("redis://127.0.0.1:1/0", connect_timeout=60)

    async def subscribe_and_drain() -> list[Event]:
        async with bus.subscribe() as subscription:
            return await drain(subscription)

    async with asyncio.timeout(TIMEOUT), asyncio.TaskGroup() as tasks:
        waiter = tasks.create_task(subscribe_and_drain())
        await asyncio.sleep(0)  # let the waiter start; the outcome is the same if it has not
        await bus.close()
    assert waiter.result() == []


def test_events_survive_encoding() -> None:
    """Encoding then decoding gives back equal events, in order."""
    events = make_events(1, 2, 3)
    assert decode_events(encode_events(events)) == events


@pytest.mark.parametrize("payload", [b"not json", b"{}", b"[1]", b'[{"seq": 1}]'])
def test_malformed_payload_is_a_value_error(payload: bytes) -> None:
    """Anything that is not a JSON array of events raises `ValueError`."""
    with pytest.raises(ValueError, match=r"."):
        decode_events(payload)
