"""The client WebSocket's fast lane (`shoal.api.fanout`): sockets following the same stream
share one writer, and still each get every event once, in order, whatever happens around the
handover: joining while events flow, a socket too slow to take a frame at once, a resubscribe,
the lane's subscription lagging, sockets of the per-socket path beside them."""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import httpx
import pytest
from uvicorn.protocols.utils import ClientDisconnected
from websockets.asyncio.client import ClientConnection, connect

from shoal.api.fanout import Lane, Lanes, Member
from shoal.api.server import RunningServer, running_server
from shoal.auth.tokens import decode_token
from shoal.config import Settings
from shoal.events import Event, EventType, NewEvent
from shoal.store.events import append_events
from shoal.store.models import utcnow
from tests.conftest import make_settings
from tests.runtime.harness import DEADLINE, login, wait_until


class Watcher:
    """One client socket: the numbers of the events it was sent, in order."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.seqs: list[int] = []
        self.kinds: list[str] = []

    async def frame(self) -> list[dict[str, Any]]:
        data = json.loads(await self.ws.recv())
        items = data["items"] if data["type"] == "batch" else [data]
        self.kinds.append(data["type"])
        self.seqs += [item["seq"] for item in items if item.get("seq")]
        return list(items)

    async def until(self, seq: int) -> None:
        """Read until the event numbered `seq` has come."""
        while not self.seqs or self.seqs[-1] < seq:
            await self.frame()

    async def subscribe(self, **message: Any) -> dict[str, Any]:
        """Send a subscription; the `subscribed` frame (events before it are kept)."""
        await self.ws.send(json.dumps({"type": "subscribe", **message}))
        while True:
            for item in await self.frame():
                if item["type"] == "subscribed":
                    return item


class Log:
    """Events of one user's task, stored and published as a control plane's would be."""

    def __init__(self, server: RunningServer, user_id: uuid.UUID) -> None:
        self.server, self.user_id = server, user_id
        self.task_id = uuid.uuid4()
        self.seqs: list[int] = []

    async def store(self, count: int, pad: int = 0) -> list[Event]:
        async with self.server.services.db.begin() as conn:
            events = await append_events(conn, [NewEvent(
                EventType.NOTICE, {"task_id": str(self.task_id), "n": i, "pad": "x" * pad},
                task_id=self.task_id, user_id=self.user_id) for i in range(count)], utcnow())
        self.seqs += [event.seq for event in events]
        return events

    async def burst(self, count: int, pad: int = 0) -> int:
        """Store and publish `count` events; the last one's number."""
        events = await self.store(count, pad)
        await self.server.services.bus.publish(events)
        return events[-1].seq


@pytest.fixture
async def log(server: RunningServer, client: httpx.AsyncClient, settings: Settings) -> Log:
    token = client.headers["Authorization"].removeprefix("Bearer ")
    user_id = decode_token(token, settings=settings, expected_type="access").user_id
    return Log(server, user_id)


@pytest.fixture
async def watch(server: RunningServer, client: httpx.AsyncClient) -> AsyncIterator[Any]:
    """Open client sockets (`?since=` if given); all closed at the end."""
    token = client.headers["Authorization"].removeprefix("Bearer ")
    opened: list[ClientConnection] = []

    async def open_socket(since: int | None = None, **options: Any) -> Watcher:
        query = f"?token={token}" + (f"&since={since}" if since is not None else "")
        ws = await connect(server.url.replace("http://", "ws://") + "/ws" + query, **options)
        opened.append(ws)
        return Watcher(ws)

    yield open_socket
    for ws in opened:
        await ws.close()


class Tap:
    """A socket's transport that notes the first byte of each write (a frame's FIN, RSV1 and
    opcode) and passes the write on."""

    def __init__(self, transport: Any) -> None:
        self.transport = transport
        self.firsts: list[int] = []

    def write(self, data: bytes) -> None:
        self.firsts.append(data[0])
        self.transport.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.transport, name)


async def three_in_a_lane(
    server: RunningServer, log: Log, watch: Any,
) -> tuple[list[Watcher], list[Member]]:
    """Three sockets that follow the same stream, caught up and in its lane; the lane's
    members, in joining order (not necessarily the sockets')."""
    watchers = [await watch() for _ in range(3)]
    return watchers, await in_one_lane(server, log, watchers)


async def caught_up(log: Log, watchers: list[Watcher], **stream: Any) -> None:
    """Subscribe `watchers` to the same batched stream (`stream`: of one task, say) and let
    them catch up with a burst."""
    for w in watchers:
        await w.subscribe(batch=True, **stream)
    last = await log.burst(2)
    for w in watchers:
        await w.until(last)


async def in_one_lane(server: RunningServer, log: Log, watchers: list[Watcher]) -> list[Member]:
    """Subscribe `watchers` to the same stream and let them catch up; the one lane's members,
    one a watcher."""
    await caught_up(log, watchers)
    members = list(the_lane(server).members)
    assert len(members) == len(watchers)
    return members


def lanes_of(server: RunningServer) -> Lanes:
    lanes: Lanes = server.app.state.lanes
    return lanes


def the_lane(server: RunningServer) -> Lane:
    (lane,) = lanes_of(server).lanes.values()
    return lane


async def test_watchers_of_one_stream_share_one_lane_under_uvicorn(
    server: RunningServer, log: Log, watch: Any,
) -> None:
    """Under the real server, sockets following the same stream end up in one lane, which then
    writes each burst once for all of them (this fails, rather than the lane silently going
    unused, if uvicorn's protocol can no longer be found from a socket)."""
    watchers = [await watch() for _ in range(3)]
    async with asyncio.timeout(DEADLINE):
        for w in watchers:
            await w.subscribe(batch=True)
        last = await log.burst(3)
        for w in watchers:
            await w.until(last)
        written = lanes_of(server).written
        lags = server.services.runtime.metrics.fanout_lag.series[("websocket",)]
        observed = sum(lags[:-1])  # the buckets and +Inf: the count
        last = await log.burst(5)
        for w in watchers:
            await w.until(last)
    assert len(the_lane(server).members) == 3
    # Each writes a burst's bytes to its transport itself (uvicorn's sans-I/O protocol found).
    assert all(member.raw is not None for member in the_lane(server).members)
    assert lanes_of(server).written == written + 1  # one list, written to all three
    assert sum(lags[:-1]) == observed + 5 * 3  # each event's lag, once per socket it reached
    for w in watchers:
        assert w.seqs == log.seqs


@pytest.mark.parametrize(("sockets", "routed"), [(1, False), (3, False), (3, True)],
                         ids=["one-socket", "a-lane", "a-lane-of-one-task"])
async def test_a_gap_in_the_log_is_filled_from_the_store_once(
    server: RunningServer, log: Log, watch: Any, sockets: int, routed: bool,
) -> None:
    """Events the bus never had (stored, never published) before a burst: a stream reads them
    from the store, then sends the burst, each event once. (A stream of every task sent the
    event that showed the gap twice: once from the store, once again from the bus.)"""
    watchers = [await watch() for _ in range(sockets)]
    async with asyncio.timeout(DEADLINE):
        await caught_up(log, watchers, **({"task_id": str(log.task_id)} if routed else {}))
        await log.store(2)  # stored, never published
        last = await log.burst(2)
        for w in watchers:
            await w.until(last)
        last = await log.burst(1)
        for w in watchers:
            await w.until(last)
    for w in watchers:
        assert w.seqs == log.seqs


@pytest.mark.parametrize("routed", [False, True], ids=["all-tasks", "one-task"])
async def test_a_burst_is_written_in_the_publishers_own_turn_unless_it_must_wait(
    server: RunningServer, log: Log, watch: Any, routed: bool,
) -> None:
    """A lane that waits for the bus writes a burst while the bus delivers it, with no task
    woken: written before the publisher's next step. A burst after a gap in the log (events the
    bus never had) waits for the lane's task, which reads them from the store first; so does
    one for a lane with a member written through the server. Every socket gets every event
    once, in order, either way."""
    watchers = [await watch() for _ in range(3)]
    lanes, bus = lanes_of(server), server.services.bus
    async with asyncio.timeout(DEADLINE):
        await caught_up(log, watchers, **({"task_id": str(log.task_id)} if routed else {}))
        written, inline = lanes.written, lanes.inline
        bus.deliver(await log.store(3))  # (delivered at once: no await until it is written)
        assert (lanes.written, lanes.inline) == (written + 1, inline + 1)
        await log.store(2)  # stored, never published: a gap before the next burst
        bus.deliver(events := await log.store(2))
        assert (lanes.written, lanes.inline) == (written + 1, inline + 1)  # the task's to write
        for w in watchers:
            await w.until(events[-1].seq)
        assert (lanes.written, lanes.inline) == (written + 2, inline + 1)
        member = next(iter(the_lane(server).members))
        through_the_server(member, member.send)
        bus.deliver(events := await log.store(1))
        assert lanes.inline == inline + 1
        for w in watchers:
            await w.until(events[-1].seq)
    assert lanes.written == written + 3
    for w in watchers:
        assert w.seqs == log.seqs


async def test_sockets_join_while_events_flow_and_miss_nothing(
    server: RunningServer, log: Log, watch: Any,
) -> None:
    """Sockets that open (some resuming from the start) while bursts keep coming each get a
    gapless run of the log, once, in order; those of the per-socket path (`any_task_types`,
    not batched) the same as those in the lane."""
    await log.burst(4)
    watchers: list[tuple[Watcher, int | None]] = []
    async with asyncio.timeout(DEADLINE):
        for round_ in range(30):
            if round_ % 3 == 0:
                since = 0 if round_ % 2 else None
                w = await watch(since)
                if round_ % 9 == 6:
                    await w.subscribe(batch=True, any_task_types=["checkpoint_ready"])
                elif round_ % 9 == 3:
                    await w.subscribe(task_id=str(log.task_id))
                else:
                    await w.subscribe(batch=True)
                watchers.append((w, since))
            await log.burst(1 + round_ % 4)
            await asyncio.sleep(0)
        last = await log.burst(2)
        for w, _ in watchers:
            await w.until(last)
    assert lanes_of(server).written > 0
    for w, since in watchers:
        if since is not None:
            assert w.seqs == [s for s in log.seqs if s > since]
        else:  # from when it subscribed: a tail of the log
            assert w.seqs == log.seqs[log.seqs.index(w.seqs[0]):]


async def held_back_then_caught_up(server: RunningServer, log: Log, watchers: list[Any],
                                   member: Member, held: AbstractAsyncContextManager[Any]) -> None:
    """While `held`, bursts go out: the lane lets `member` go and the two others go on getting
    every burst (it stalls no one); once `held` is over, every socket gets every event."""
    async with held:
        for _ in range(5):
            last = await log.burst(3)
        reading = [asyncio.create_task(w.until(last)) for w in watchers]
        done: set[asyncio.Task[None]] = set()
        while len(done) < 2:
            done, _ = await asyncio.wait(reading, return_when=asyncio.FIRST_COMPLETED)
        (stalled,) = (t for t in reading if t not in done)
        assert member not in the_lane(server).members
        assert len(the_lane(server).members) == 2
    await stalled
    last = await log.burst(2)
    for w in watchers:
        await w.until(last)
    for w in watchers:
        assert w.seqs == log.seqs


@contextlib.asynccontextmanager
async def paused(member: Member) -> AsyncIterator[None]:
    """`member`'s transport paused, as uvicorn's protocol marks it (its `writable` cleared)."""
    member.writable.clear()
    try:
        yield
    finally:
        member.writable.set()


async def test_a_socket_that_cannot_take_a_frame_at_once_leaves_the_lane_and_misses_nothing(
    server: RunningServer, log: Log, watch: Any,
) -> None:
    """A member whose transport is paused is let go (the others go on getting every burst
    meanwhile), and once it can write again it gets everything from where it was."""
    async with asyncio.timeout(DEADLINE):
        watchers, members = await three_in_a_lane(server, log, watch)
        await held_back_then_caught_up(server, log, watchers, members[1], paused(members[1]))


async def test_a_frame_the_server_cannot_write_lets_its_socket_go_as_a_client_that_left(
    server: RunningServer, log: Log, watch: Any,
) -> None:
    """The lane writes through the server's own `send`. When that fails as it does for a client
    gone (uvicorn's `ClientDisconnected`, an `OSError`), that socket's stream ends as Starlette
    ends it for a client that left: quietly, the socket still open to subscribe again (an
    error let through would close it). The others miss nothing."""
    async with asyncio.timeout(DEADLINE):
        watchers, members = await three_in_a_lane(server, log, watch)
        gone = members[1]

        async def send(message: dict[str, Any]) -> None:
            raise ClientDisconnected()

        through_the_server(gone, send)
        for _ in range(3):
            last = await log.burst(2)
        reading = [asyncio.create_task(w.until(last)) for w in watchers]
        done: set[asyncio.Task[None]] = set()
        while len(done) < 2:  # two get every burst; the one let go, none past its failure
            done, _ = await asyncio.wait(reading, return_when=asyncio.FIRST_COMPLETED)
        (stalled,) = (t for t in reading if t not in done)
        stalled.cancel()  # (cancelling `recv` loses nothing: websockets says so)
        with contextlib.suppress(asyncio.CancelledError):
            await stalled
        failed = watchers[reading.index(stalled)]
        assert gone not in the_lane(server).members
        assert len(the_lane(server).members) == 2
        await failed.subscribe(batch=True, since=0)  # still open, and heard
        await failed.until(last)
    for w in watchers:
        if w is not failed:
            assert w.seqs == log.seqs
    assert sorted(set(failed.seqs)) == log.seqs


def through_the_server(member: Member, send: Any) -> None:
    """Make `member` one whose frames go through the server's `send` (`send`), as a socket that
    agreed to compression is: the lane never writes its bytes itself, and takes its bursts in
    its own task rather than in the publisher's turn."""
    member.send, member.raw, member.direct = send, None, False
    member.lane.indirect += 1


async def test_a_socket_answering_a_frame_of_its_own_leaves_the_lane_and_misses_nothing(
    server: RunningServer, log: Log, watch: Any,
) -> None:
    """A member whose lock is held (its socket answering a client frame: no event may go out
    meanwhile) is let go, the others go on, and once the lock is free it gets everything from
    where it was."""
    async with asyncio.timeout(DEADLINE):
        watchers, members = await three_in_a_lane(server, log, watch)
        await held_back_then_caught_up(server, log, watchers, members[1], members[1].lock)


async def test_a_socket_in_a_lane_resubscribes_as_any_other(
    server: RunningServer, log: Log, watch: Any,
) -> None:
    """Resubscribing from the lane: every frame of the old stream before `subscribed`, the new
    one's after it, carrying on from where the old one was (it wants less: no gap)."""
    w, other = await watch(), await watch()
    async with asyncio.timeout(DEADLINE):
        await w.subscribe(batch=True)
        await other.subscribe(batch=True)
        last = await log.burst(2)
        await w.until(last)
        await other.until(last)
        assert len(the_lane(server).members) == 2
        last = await log.burst(3)
        subscribed = await w.subscribe(batch=True, task_id=str(log.task_id))
        assert subscribed["data"]["since"] == w.seqs[-1]  # where the lane had got it to
        last = await log.burst(4)
        await w.until(last)
        await other.until(last)
    assert w.seqs == log.seqs
    assert other.seqs == log.seqs


async def test_a_lagging_lane_sends_its_members_back_to_the_store(
    server: RunningServer, log: Log, watch: Any,
) -> None:
    """When the lane's subscription lags, each member resyncs from the store on a stream of its
    own, then joins a lane again: nothing lost, nothing twice."""
    watchers = [await watch() for _ in range(3)]
    async with asyncio.timeout(DEADLINE):
        for w in watchers:
            await w.subscribe(batch=True)
        last = await log.burst(2)
        for w in watchers:
            await w.until(last)
        lane = the_lane(server)
        await log.store(5)  # stored, and lost to the bus: only the store has them
        server.services.bus.lag_all()
        last = await log.burst(3)
        for w in watchers:
            await w.until(last)
        assert lane.ended
        last = await log.burst(2)
        for w in watchers:
            await w.until(last)
    for w in watchers:
        assert w.seqs == log.seqs


async def test_a_client_that_stops_reading_is_let_go_when_its_transport_pauses(
    server: RunningServer, log: Log, watch: Any,
) -> None:
    """For real: a client that reads nothing fills its TCP buffers until uvicorn pauses its
    transport; the lane lets it go (it never waits for it), the others get every burst, and
    once the client reads again it gets everything, in order, once."""
    fast = [await watch(max_size=None) for _ in range(2)]
    slow = await watch(max_size=None, max_queue=1)
    lanes = lanes_of(server)
    async with asyncio.timeout(DEADLINE * 3):
        for w in [*fast, slow]:
            await w.subscribe(batch=True)
        last = await log.burst(1)
        for w in [*fast, slow]:
            await w.until(last)
        released = lanes.released
        bursts = 0
        while lanes.released == released:  # the slow one's buffers are not full yet
            bursts += 1
            assert bursts < 400, "the transport never paused"
            last = await log.burst(4, pad=50_000)
            for w in fast:
                await w.until(last)
        assert len(the_lane(server).members) == 2
        last = await log.burst(2)
        for w in fast:
            await w.until(last)
        await slow.until(last)
    for w in [*fast, slow]:
        assert w.seqs == log.seqs


async def test_when_the_bus_closes_members_end_their_streams_rather_than_rejoin(
    server: RunningServer, log: Log, watch: Any,
) -> None:
    """A closed bus ends the lane; its members go back to streams of their own, which find the
    bus closed and end too: no socket joins a lane again (that would hand over for ever)."""
    watchers = [await watch() for _ in range(2)]
    async with asyncio.timeout(DEADLINE):
        for w in watchers:
            await w.subscribe(batch=True)
        last = await log.burst(2)
        for w in watchers:
            await w.until(last)
    lanes, lane = lanes_of(server), the_lane(server)
    joined = lanes.joined
    await server.services.bus.close()
    await lane.task

    def pushing() -> bool:
        return any(getattr(t.get_coro(), "__qualname__", "") == "_push"
                   for t in asyncio.all_tasks())

    await wait_until(lambda: not pushing(), what="the sockets' streams to end")
    assert lanes.lanes == {}
    assert lanes.joined == joined


async def test_a_socket_ahead_of_its_lane_does_not_join_it_until_the_lane_catches_up(
    server: RunningServer, log: Log, watch: Any,
) -> None:
    """Events stored but not yet published: a socket's replay has sent them while the lane
    has not seen them. It joins only once the lane is where it is; else the lane would send
    them again."""
    first, second = await watch(), await watch()
    async with asyncio.timeout(DEADLINE):
        await first.subscribe(batch=True)
        last = await log.burst(2)
        await first.until(last)
        early = await log.store(3)  # committed; their publish comes later
        await second.subscribe(batch=True, since=0)
        await second.until(early[-1].seq)
        await server.services.bus.publish(early)
        for _ in range(50):  # it joins after a burst that finds both idle at the same place
            last = await log.burst(1)
            for w in (first, second):
                await w.until(last)
            if len(the_lane(server).members) == 2:
                break
        assert len(the_lane(server).members) == 2
        last = await log.burst(2)
        for w in (first, second):
            await w.until(last)
    assert first.seqs == log.seqs
    assert second.seqs == log.seqs


async def test_compressed_and_plain_sockets_share_a_lane_and_each_reads_every_event(
    tmp_path: Path,
) -> None:
    """With compression agreed on some sockets and not others (`ws_compression`, a client that
    offers it and one that does not), the lane writes a burst's bytes as they are only to the
    plain ones and sends the others theirs through the server, compressed: each reads every
    event, in order, and no frame reaches the wrong kind of socket."""
    settings = make_settings(tmp_path, ws_compression=True)
    async with running_server(settings) as srv:
        client = await login(srv, settings)
        token = client.headers["Authorization"].removeprefix("Bearer ")
        user_id = decode_token(token, settings=settings, expected_type="access").user_id
        log = Log(srv, user_id)
        url = srv.url.replace("http://", "ws://") + f"/ws?token={token}"
        sockets = [await connect(url), await connect(url, compression=None),
                   await connect(url), await connect(url, compression=None)]
        try:
            watchers = [Watcher(ws) for ws in sockets]
            async with asyncio.timeout(DEADLINE):
                members = await in_one_lane(srv, log, watchers)
                assert sorted(bool(m.raw.conn.extensions) for m in members) == [
                    False, False, True, True]
                taps = {m: Tap(m.raw.transport) for m in members}
                for member, tap in taps.items():
                    member.raw.transport = tap
                for _ in range(4):
                    last = await log.burst(3, pad=2000)  # large enough to compress
                for w in watchers:
                    await w.until(last)
            for w in watchers:
                assert w.seqs == log.seqs
            for member, tap in taps.items():  # RSV1: the message is compressed
                compressed = {bool(first & 0x40) for first in tap.firsts}
                assert compressed == {bool(member.raw.conn.extensions)}, tap.firsts
        finally:
            for ws in sockets:
                await ws.close()
            await client.aclose()
