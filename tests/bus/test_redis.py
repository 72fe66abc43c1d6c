"""The Redis bus passes the bus conformance suite, survives a dropped connection, and a copy
hears only the tasks its subscriptions follow (each task on its own channel, ADR 0043).

Needs a real Redis (`SHOAL_TEST_REDIS_URL`, default redis://127.0.0.1:6379/0). Without one the
tests are skipped with the reason shown, except under `CI=true`, where they fail.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError

from shoal.bus import keys
from shoal.bus.base import EventBus, Lagged
from shoal.bus.memory import DEFAULT_QUEUE_SIZE
from shoal.bus.redis import (
    RedisBus,
    _cause,
    decode_events,
    decode_routed,
    encode_events,
    encode_routed,
)
from shoal.errors import Unavailable
from shoal.events import Event
from tests.bus.conformance import (
    TASK_ID,
    TIMEOUT,
    BusConformance,
    MakeBus,
    drain,
    make_event,
    make_events,
    take,
)

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


@pytest.fixture
async def make_redis_bus(redis_url: str, channel: str) -> AsyncIterator[Callable[..., RedisBus]]:
    """Fresh `RedisBus`es (each its own copy) on this test's channel, closed after the test."""
    buses: list[RedisBus] = []

    def make(**options: Any) -> RedisBus:
        buses.append(RedisBus(redis_url, channel=channel, **options))
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


def test_an_events_stored_text_goes_into_its_message_as_it_is() -> None:
    """An event that carries its data's text (as its row was written) is published with that
    text, not its data encoded again, and decodes to an equal event."""
    events = [replace(e, text=json.dumps(e.data)) for e in make_events(1, 2)]
    message = encode_events(events)
    assert all(f'"data":{e.text}' in message for e in events)
    assert decode_events(message) == events == make_events(1, 2)


@pytest.mark.parametrize("payload", [b"not json", b"{}", b"[1]", b'[{"seq": 1}]'])
def test_malformed_payload_is_a_value_error(payload: bytes) -> None:
    """Anything that is not a JSON array of events raises `ValueError`."""
    with pytest.raises(ValueError, match=r"."):
        decode_events(payload)


OTHER = uuid.UUID("00000000-0000-4000-8000-000000000003")


def of(task_id: uuid.UUID, *seqs: int) -> list[Event]:
    """Events of `task_id` numbered `seqs`."""
    return [replace(make_event(seq), task_id=task_id) for seq in seqs]


async def test_a_copy_hears_only_the_tasks_it_follows(
    make_redis_bus: Callable[..., RedisBus],
) -> None:
    """A copy whose subscriptions follow one task receives that task's events and none of
    another's; once one follows everything, it receives every event."""
    here, there = make_redis_bus(), make_redis_bus()
    async with here.subscribe(TASK_ID) as mine:
        # The other task's message is sent first on one connection: had this copy been
        # subscribed to it, it would have arrived before the one awaited.
        await there.publish([*of(OTHER, 1, 2, 3), *of(TASK_ID, 4)])
        assert await take(mine, 1) == of(TASK_ID, 4)
        assert here.heard == 1
        async with here.subscribe() as everything:
            await there.publish([*of(OTHER, 5), *of(TASK_ID, 6)])
            assert await take(everything, 2) == [*of(OTHER, 5), *of(TASK_ID, 6)]
            assert await take(mine, 1) == of(TASK_ID, 6)
    # The task's message and the deployment's, each heard once; the other task's never.
    assert here.heard == 1 + 2 + 1


async def test_a_channel_is_left_when_its_last_follower_leaves(
    make_redis_bus: Callable[..., RedisBus], admin: aioredis.Redis,
) -> None:
    """The listener unsubscribes from a task's channel when no subscription here follows the
    task any more, and a new follower subscribes to it again and misses nothing."""
    bus = make_redis_bus()
    channel = bus.task_channel(TASK_ID)
    async with bus.subscribe(TASK_ID), bus.subscribe(TASK_ID):
        assert await admin.pubsub_numsub(channel) == [(channel.encode(), 1)]
    # A later SUBSCRIBE is sent after the UNSUBSCRIBE: once it is confirmed, that is done.
    async with bus.subscribe(OTHER):
        assert await admin.pubsub_numsub(channel) == [(channel.encode(), 0)]
    for n in range(20):  # leave and follow again at once, each time receiving what follows
        async with bus.subscribe(TASK_ID) as again:
            await bus.publish(of(TASK_ID, n + 1))
            assert await take(again, 1) == of(TASK_ID, n + 1)


async def test_a_lost_message_of_a_task_is_told_by_the_next(
    make_redis_bus: Callable[..., RedisBus],
) -> None:
    """Each task's message names the number the copy published before it, so when one never
    arrives (its publish failed) the next tells its followers what may be missing; a message
    of another task in between tells them of no gap. (`gap_through`: the reader must have
    the task's events up to this number; if its last is lower it reads the store.)"""
    here, there = make_redis_bus(), make_redis_bus()
    async with here.subscribe(TASK_ID) as mine:
        await there.publish(of(TASK_ID, 1, 2))
        assert await take(mine, 2) == of(TASK_ID, 1, 2)
        assert mine.gap_through == 0  # the first message: the number before it not known
        await there.publish(of(OTHER, 3))
        await there.publish(of(TASK_ID, 4))
        assert await take(mine, 1) == of(TASK_ID, 4)
        assert mine.gap_through == 2  # the reader has 2: 3 was another task's, no gap
        there._messages(of(TASK_ID, 5, 6))  # encoded and numbered, then never sent
        await there.publish(of(TASK_ID, 7))
        assert await take(mine, 1) == of(TASK_ID, 7)
        assert mine.gap_through == 6  # the reader, at 4, reads 5 and 6 from the store


async def test_a_copy_vouches_for_its_last_number_only_for_a_while(
    make_redis_bus: Callable[..., RedisBus],
) -> None:
    """Past `prev_ttl` (the claim's lifetime: another copy may have written the task since),
    a message says the number before is not known, and its followers check everything
    before it."""
    here, there = make_redis_bus(), make_redis_bus(prev_ttl=0)
    async with here.subscribe(TASK_ID) as mine:
        await there.publish(of(TASK_ID, 1))
        await there.publish(of(TASK_ID, 9))
        assert await take(mine, 2) == of(TASK_ID, 1, 9)
        assert mine.gap_through == 8


async def test_live_text_changes_nothing_in_the_order(
    make_redis_bus: Callable[..., RedisBus],
) -> None:
    """Streamed text (no number) reaches the task's followers and tells them of no gap."""
    here, there = make_redis_bus(), make_redis_bus()
    async with here.subscribe(TASK_ID) as mine:
        await there.publish(of(TASK_ID, 1))
        await there.publish(of(TASK_ID, 0))
        await there.publish(of(TASK_ID, 2))
        assert await take(mine, 3) == of(TASK_ID, 1, 0, 2)
        assert mine.gap_through == 1  # the reader has 1


async def test_a_routed_subscription_is_lagged_by_a_dropped_connection(
    make_redis_bus: Callable[..., RedisBus], admin: aioredis.Redis,
) -> None:
    """A dropped listener lags a task's followers too; a new follower hears the task again."""
    name = f"shoal-test-{uuid.uuid4().hex[:12]}"
    bus = make_redis_bus(client_name=name)
    async with bus.subscribe(TASK_ID) as before:
        await kill_listener(admin, name)
        with pytest.raises(Lagged):
            await take(before, 1)
    async with bus.subscribe(TASK_ID) as after:
        await bus.publish(of(TASK_ID, 3))
        assert await take(after, 1) == of(TASK_ID, 3)


async def test_an_undecodable_task_message_lags_its_followers(
    make_redis_bus: Callable[..., RedisBus], admin: aioredis.Redis,
) -> None:
    """A task channel's message that is not `{"prev": …, "events": […]}` makes its followers
    resync."""
    bus = make_redis_bus()
    async with bus.subscribe(TASK_ID) as mine:
        await admin.publish(bus.task_channel(TASK_ID), b"[]")
        with pytest.raises(Lagged):
            await take(mine, 1)


@pytest.mark.parametrize("prev", [None, 0, 41])
def test_task_messages_survive_encoding(prev: int | None) -> None:
    """A task channel's message gives back its number before and its events."""
    events = make_events(42, 43)
    assert decode_routed(encode_routed(prev, [encode_events([e])[1:-1] for e in events])) == (
        prev, events)


@pytest.mark.parametrize("payload", [b"[]", b'{"prev": 1}', b'{"prev": "1", "events": []}',
                                     b'{"prev": true, "events": []}', b'{"events": [{}]}'])
def test_malformed_task_message_is_a_value_error(payload: bytes) -> None:
    """Anything that is not a task channel's message raises `ValueError`."""
    with pytest.raises(ValueError, match=r"."):
        decode_routed(payload)


def test_a_lost_connection_is_told_from_the_listeners_errors() -> None:
    """When Redis goes away, the listener's reader and its steering task may fail at once, one
    of them with something other than a Redis error (uvloop's closed transport): the listener
    reports the lost connection, which it logs as a warning, not as a failure."""
    lost = RedisConnectionError("Connection closed by server.")
    other = RuntimeError("unable to perform operation on <TCPTransport closed=True>")
    assert _cause(ExceptionGroup("listener", [other, lost])) is lost
    assert _cause(ExceptionGroup("listener", [ExceptionGroup("inner", [lost]), other])) is lost
    assert _cause(ExceptionGroup("listener", [other])) is other
    assert _cause(other) is other
