"""The client WebSocket's fast lane: one writer per live stream, for every socket following it.

Each socket that follows events live would otherwise run its own task, bus subscription and
filter, and encode each frame itself: a burst woke one task per watcher. Sockets that follow
the same stream (one user's events, of one task or all, of the same types, batched or not,
without `any_task_types` or workflow names) and are caught up share one `Lane` instead: one
bus subscription, one `Live` (gap filling, fan-out lag), a frame encoded once and written to
each socket in turn by one task.

A socket joins only from its own stream (`client_ws._push`), at a point where both are
exactly at the same place (`Lanes.join`), and goes back to its own stream, from where its
span says it is (`Span.through`), whenever the lane cannot serve it at once: its transport
is paused (a slow reader must not stall the others), its lock is held (a client frame is being
answered: `answered` comes before the events it causes, `subscribed` between two streams), the
lane's subscription lagged, or the bus closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog
from websockets.protocol import OPEN

from shoal.api.direct import Send, failure, wire
from shoal.api.streams import Follow, Live
from shoal.api.subscriptions import Interest, Sent, Span
from shoal.bus.base import Lagged, Subscription
from shoal.errors import ShoalError
from shoal.events import Event, as_json
from shoal.metrics import StreamKind

if TYPE_CHECKING:
    from datetime import datetime

    from shoal.api.deps import Services

log = structlog.get_logger(__name__)

_TRIES = 3  # times a stream checks whether its lane has caught up with it, after a list

Key = tuple[uuid.UUID, uuid.UUID | None, frozenset[str], bool, StreamKind]

@dataclass(frozen=True, slots=True)
class Seat:
    """A socket's stream, as a lane sees it: whose, what it carries, how to write to the
    socket (`send`, the server's own), when it can take a frame at once (`writable`, its
    `lock` free), what it sent."""

    user_id: uuid.UUID
    interest: Interest
    kind: StreamKind
    limit: int
    send: Send
    raw: Any  # `Direct.raw`
    lock: asyncio.Lock
    writable: asyncio.Event
    sent: Sent
    span: Span

    @property
    def key(self) -> Key:
        """The lane this stream shares: sockets with the same key follow the same events."""
        interest = self.interest
        return (self.user_id, interest.task_id, interest.types, interest.batch, self.kind)


class Member:
    """One socket in a lane: how to write to it, when it can take a frame at once, and what it
    has sent; `left` is done when the lane lets it go (an exception: its send failed).

    `through`: the last number of what the lane wrote to it, recorded in its span (`advance`)
    only when it leaves: nothing reads the span while the lane writes."""

    __slots__ = ("direct", "lane", "left", "lock", "raw", "send", "sent", "span", "through",
                 "writable")

    def __init__(self, lane: Lane, seat: Seat) -> None:
        self.lane, self.send, self.raw, self.lock = lane, seat.send, seat.raw, seat.lock
        self.writable, self.sent, self.span = seat.writable, seat.sent, seat.span
        self.through = seat.span.through
        self.left: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        # Its frames go to its transport as the bytes the lane made (no compression agreed).
        self.direct = seat.raw is not None and not seat.raw.conn.extensions


class Lane:
    """One live stream written to many sockets by one task."""

    def __init__(self, lanes: Lanes, key: Key, interest: Interest, limit: int, live: Live,
                 entered: AbstractAsyncContextManager[Subscription], sub: Subscription) -> None:
        self.lanes, self.key, self.interest, self.limit = lanes, key, interest, limit
        self.live, self.sub, self._entered = live, sub, entered
        self.members: dict[Member, None] = {}  # in joining order
        self.indirect = 0  # members whose frames go through the server's `send` (not `direct`)
        self.idle = True  # the writer waits for the bus: it has written all it took
        self.started = self.ended = False
        self.top = 0  # the last number of the lists written
        self.routed = sub if interest.task_id is not None else None  # (see `Live.wanted`)
        metrics = live.services.runtime.metrics
        live.fanout_lag = self._lag_for_all(metrics.delivered_all)
        self.task = asyncio.create_task(self._write(), name="shoal-fanout-lane")
        lanes.tasks.add(self.task)
        self.task.add_done_callback(lanes.tasks.discard)
        sub.inline = self._now

    def _lag_for_all(self, observe: Callable[..., None]) -> Callable[..., None]:
        """The fan-out lag, observed once per event for every member (as each socket's own
        stream would), not once per lane."""
        def observed(kind: StreamKind, stamps: list[datetime], now: datetime) -> None:
            observe(kind, stamps, now, len(self.members))
        return observed

    async def _write(self) -> None:
        sub, live, limit, routed = self.sub, self.live, self.limit, self.routed
        self.started = True
        try:
            while not self.ended:
                self.idle = True
                events = await sub.take(limit)
                self.idle = False
                if not events:  # the bus closed
                    return
                items = await live.wanted(events, routed)
                if items:
                    await self._send(items)
                if not self.members:
                    return
        except Lagged:
            pass  # every member resyncs from the store on its own stream
        except Exception:
            log.exception("fanout.lane_failed")  # members carry on, each on its own stream
        finally:
            self.idle = False
            self.end()
            await self._entered.__aexit__(None, None, None)

    def _now(self, events: Sequence[Event]) -> bool:
        """Write `events` in the publisher's own turn, as the writer would once it took them
        from the bus, when nothing has to wait: the writer idle (it waits for the bus, and the
        bus has nothing queued for it), no gap in the log to fill from the store, one frame (a
        batched stream, or one event) and every member written to as the frame's bytes. Whether
        it did (else the bus queues them, and the writer's task is woken for them): a burst
        then costs no task switch, as the fan-out floor's publisher writes it itself."""
        if (not self.idle or not self.started or self.ended or self.indirect
                or not (self.interest.batch or len(events) == 1)):
            return False
        try:
            items = self.live.wanted_now(events, self.routed)
            if items is None:
                return False
            self.lanes.inline += 1
            if items:
                frames, top = self._framed(items)
                if frames:
                    ((_, text),) = frames  # (one at most: batched, or one event)
                    for member in self._write_one(text, top):
                        self.release(member)  # (a socket closing: its own stream says so)
                else:
                    self._passed(top)
                if not self.members:
                    self.end()
        except Exception:
            log.exception("fanout.lane_failed")  # members carry on, each on its own stream
            self.end()
        return True

    async def _send(self, items: list[dict[str, Any]]) -> None:
        """Write `items` (as `client_ws._send_stream` would) to every member that can take
        them now; let go of the others, where they are."""
        frames, top = self._framed(items)
        members = self.members
        if len(frames) == 1:  # the usual case: a burst's one frame to each member
            ((_, text),) = frames
            for member in self._write_one(text, top):
                if member not in members:
                    continue
                if member.lock.locked() or not member.writable.is_set():
                    self.release(member)
                    continue
                try:  # written at once: it does not suspend
                    await member.send({"type": "websocket.send", "text": text})
                except Exception as exc:
                    self.release(member, failure(exc))
                    continue
                member.through = top
        elif frames:
            for member in list(members):
                if member in members:
                    await self._send_to(member, frames, top)
        else:
            self._passed(top)
        if not members:
            self.end()

    def _framed(self, items: list[dict[str, Any]]) -> tuple[list[tuple[int, str]], int]:
        """`items`' frames, and the last number they bring the members to (`top`: where the
        last list was, if they bring only live-only items)."""
        self.lanes.written += 1
        top = self.top = _top(items) or self.top
        return _frames(self.interest, items), top

    def _passed(self, top: int) -> None:
        """No frame for a list: every member has gone through it all the same."""
        for member in self.members:
            if member.through < top:
                member.through = top

    def _write_one(self, text: str, top: int) -> list[Member]:
        """Write the frame `text` as its bytes to every member that can take it now, and let
        go of those that cannot (paused, or answering a frame of their own); the members it
        must go to through the server's `send` instead (compression agreed, no raw protocol, a
        socket closing), in order."""
        members, slow = self.members, []
        data = b""  # the frame's bytes on the wire, made for the first socket that takes them
        for member in list(members):
            if member not in members:
                continue
            if (member.lock._locked  # type: ignore[attr-defined]  # (`direct.FIELDS`)
                    or not member.writable._value):  # type: ignore[attr-defined]
                self.release(member)
                continue
            raw = member.raw
            # What uvicorn's `send` would check and write, without a call: the socket open,
            # no close sent, no extension (compression) that changes the bytes.
            if (raw is None or (conn := raw.conn)._state is not OPEN or conn.extensions
                    or raw.close_sent or raw.disconnected):
                slow.append(member)
                continue
            try:
                raw.transport.write(data or (data := wire(text)))
            except Exception as exc:
                self.release(member, failure(exc))
                continue
            member.through = top
        return slow

    async def _send_to(self, member: Member, frames: list[tuple[int, str]], top: int) -> None:
        """Write `frames` to `member` if it takes each at once; else let it go, where it is
        (the frames before sent: the stream it goes back to starts after them)."""
        for seq, text in frames:
            # Checked before each frame: the one before may have filled the transport.
            if member.lock.locked() or not member.writable.is_set():
                self.release(member)
                return
            try:  # written at once: it does not suspend
                await member.send({"type": "websocket.send", "text": text})
            except Exception as exc:
                self.release(member, failure(exc))
                return
            member.through = max(member.through, seq)
        member.through = max(member.through, top)

    def release(self, member: Member, error: BaseException | None = None) -> None:
        """Let `member` go back to its own stream (or fail with `error`)."""
        if self.members.pop(member, False) is None:
            self.indirect -= not member.direct
            _let_go(member, error)
        if not self.members:
            self.end()

    def end(self) -> None:
        """Take no more members, let every member go, and stop the writer: at once if it waits
        for the bus, else after the list it is writing. (A writer cancelled before it started
        would never leave the bus: one not started yet sees `ended` and leaves.)"""
        if self.ended:
            return
        self.ended = True
        self.sub.inline = None
        if self.lanes.lanes.get(self.key) is self:
            del self.lanes.lanes[self.key]
        members = list(self.members)
        self.members.clear()  # in place: a writer's loop over it sees each one gone
        self.indirect = 0
        for member in members:
            _let_go(member)
        if self.started and self.idle and asyncio.current_task() is not self.task:
            self.task.cancel()


def _let_go(member: Member, error: BaseException | None = None) -> None:
    """Record where `member` is in its span, and wake its stream (to carry on, or to fail)."""
    member.sent.advance(member.span, member.through)
    left = member.left
    if not left.done():
        member.lane.lanes.released += 1
        if error is None:
            left.set_result(None)
        else:
            left.set_exception(error)


def _frames(interest: Interest, items: list[dict[str, Any]]) -> list[tuple[int, str]]:
    """The frames `items` go out as, each with the highest number it carries."""
    if interest.also:
        out = [item for item in items if interest.wants(item)]
    else:  # a lane's usual interest: `Interest.wants` inline (a call an item, once a lane)
        types, task = interest.types, interest.task
        out = [item for item in items if item["type"] in types
               and (task is None or item["data"].get("task_id") == task)]
    if len(out) == 1 or (out and not interest.batch):
        return [(item.get("seq") or 0, as_json(item)) for item in out]
    if out:  # one frame, encoded once for every member; its number is its last (a live
        # stream's items come in order, and streamed text has none)
        return [(_top(out), '{"type": "batch", "items": [' + ", ".join(map(as_json, out))
                 + "]}")]
    return []


def _top(items: list[dict[str, Any]]) -> int:
    """The highest number `items` (in order) carry; 0 if none has one (streamed text)."""
    for item in reversed(items):
        if seq := item.get("seq"):
            return int(seq)
    return 0


class Lanes:
    """The lanes of one app, by stream; closed when the app stops."""

    def __init__(self) -> None:
        self.lanes: dict[Key, Lane] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        self.written = 0  # lists written by a lane (each to all its members): tests read it
        self.inline = 0  # … of which in the publisher's own turn (`Lane._now`)
        self.joined = self.released = 0  # sockets that joined a lane, and that it let go

    def join_at(self, seat: Seat, after: int) -> Member | None:
        """A socket whose new stream would start after `after` (nothing owed before it, no
        `caught_up` to say) joins its lane at once, if the lane is exactly there: no
        subscription, no replay of its own. The member, or None.

        Why nothing is lost or repeated: as in `join`, with the socket's stream replaced by
        its plan: it has sent what it wants through `after`, and nothing after."""
        lane = self.lanes.get(seat.key)
        if lane is None or not seat.writable.is_set() or not seat.sent.nothing_past(after):
            return None
        return self._sit(lane, seat, after)

    async def join(self, services: Services, seat: Seat, follow: Follow) -> Member | None:
        """Move a socket from its own stream (`follow`, just after it sent a list and recorded
        it) to the lane of its stream, when that loses and repeats nothing; the member, or
        None (the socket carries on with its own stream).

        Why nothing is lost or repeated: the stream is `ready` and its subscription's queue
        is empty, so it has gone through every event published since it subscribed, and the
        replay before; it went through the log up to `live.last` = L, and the socket sent all
        it wanted of those (`nothing_past(L)`: none after L). The lane is idle (waiting for
        the bus) with an empty queue, and its `live.last` is L too: every event published
        since it subscribed has been written, and those up to L it wanted went to its members.
        Every event after L is in neither stream yet, and reaches the lane's subscription
        when published (it subscribed when its first member was at L, the same way: every
        event before that was that member's to go through). All of this is checked with no
        await before the member is added."""
        sub, live = follow.sub, follow.live
        if (not follow.ready or sub is None or live is None or not seat.writable.is_set()
                or not seat.sent.nothing_past(live.last)):
            return None
        lane = self.lanes.get(seat.key)
        if lane is None:
            if not sub.empty():
                return None
            try:
                lane = await self._open(services, seat, live.last)
            except ShoalError as exc:  # (a RedisBus that cannot subscribe now)
                log.warning("fanout.lane_not_opened", error=exc.code)
                return None  # the stream carries on, on its own subscription
        member = None
        for _ in range(_TRIES):
            if not follow.ready or not sub.empty() or not seat.sent.nothing_past(live.last):
                break  # it has more to go through on its own
            member = self._sit(lane, seat, live.last)
            if member is not None or lane.ended or (lane.idle and lane.sub.empty()):
                break
            # The lane has yet to write what this stream just did (woken by the same publish,
            # it runs next): let it, then check everything again.
            await asyncio.sleep(0)
        if member is None and not lane.members:
            lane.end()  # opened for this socket, which cannot join after all
        return member

    def _sit(self, lane: Lane, seat: Seat, last: int) -> Member | None:
        """Add the socket, at `last`, to `lane` if the lane is idle and there too."""
        if lane.ended or not lane.idle or not lane.sub.empty() or lane.live.last != last:
            return None
        member = Member(lane, seat)
        lane.members[member] = None
        lane.indirect += not member.direct
        self.joined += 1
        return member

    async def _open(self, services: Services, seat: Seat, last: int) -> Lane:
        """A lane at `last`, subscribed now (a `MemoryBus` registers the subscription before
        its first await; a `RedisBus` may wait for its listener first, so `join` checks again
        after this)."""
        entered = services.bus.subscribe(seat.interest.task_id)
        sub = await entered.__aenter__()
        found = self.lanes.get(seat.key)
        if found is not None:  # another socket opened it while this one waited
            await entered.__aexit__(None, None, None)
            return found
        live = Live(services, seat.user_id, seat.interest.task_id, frozenset(), seat.kind, last)
        lane = self.lanes[seat.key] = Lane(self, seat.key, seat.interest, seat.limit, live,
                                           entered, sub)
        return lane

    async def ride(self, member: Member) -> None:
        """Wait while the lane writes to `member`; leave it however this ends."""
        try:
            await member.left
        finally:
            member.lane.release(member)
            if member.left.done() and not member.left.cancelled():
                member.left.exception()  # seen, even if this task was cancelled meanwhile

    async def close(self) -> None:
        """End every lane and wait for their writers."""
        for lane in list(self.lanes.values()):
            lane.end()
        if self.tasks:
            _, pending = await asyncio.wait(list(self.tasks), timeout=5)
            for task in pending:
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.gather(*pending, return_exceptions=True)
