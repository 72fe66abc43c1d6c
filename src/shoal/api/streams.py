"""Replayable event streams for SSE and WebSocket clients.

Subscribe to the bus first, replay the gap from the store, then follow live events, skipping
any already sent. A gap in live sequence numbers is filled from the store, and a lagging
subscription resyncs from the store, so a client sees every event it may see, once, in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from shoal.bus.base import Lagged, Subscription
from shoal.events import Event, EventType
from shoal.mailbox import Mailbox
from shoal.metrics import StreamKind
from shoal.store.events import events_since, last_seq
from shoal.store.models import utcnow

if TYPE_CHECKING:
    from shoal.api.deps import Services

PAGE = 1000
QUIETING = frozenset({EventType.TASK_COMPLETE, EventType.TASK_FAILED, EventType.TASK_CANCELLED,
                      EventType.CHECKPOINT_READY})
"""Events after which a task goes quiet (it ended, or waits for a person): a lingering stream
sends them at once."""


async def current_seq(services: Services) -> int:
    """The newest sequence number in the log."""
    async with services.db.connection() as conn:
        return await last_seq(conn)


async def replay_then_live_batches(
    services: Services, *, user_id: uuid.UUID, task_id: uuid.UUID | None, since: int,
    kind: StreamKind, also: frozenset[str] = frozenset(), announce: bool = False,
    limit: int = PAGE, follow: Follow | None = None, linger: float = 0.0,
) -> AsyncGenerator[list[dict[str, Any]], None]:
    """Every event after `since` visible to the user (for one task, if given), then live ones,
    in lists: the replay in pages of at most `limit`, then what the bus queued for this
    subscriber while the last list was being sent (at most `limit` at a time), so a burst
    goes out in few frames and a lone event at once.

    `linger`: the least time between two live lists (ADR 0051). A live event that comes
    sooner than that after the last live list waits out the rest of it, and goes with
    whatever came meanwhile (up to `limit`); one after a quiet spell goes at once, and so does
    a list that ends a task or asks a person (`QUIETING`: nothing follows it soon, and it is
    what a client waits for). A task that publishes every millisecond or two then costs its
    client a write every `linger`, not one a step.

    `also`: event types wanted live from every task of the user's, beside the one task's (not
    replayed: a client reads what it missed of those from the API). `announce`: a `caught_up`
    item (no `seq`) once the replay of the past has been sent.

    Each live event, including one fetched from the store to fill a gap in the bus's order, is
    observed in the `kind` stream's fan-out lag; the replay of the past is not.

    `follow`, if given, is kept up to date with the stream's subscription and live half, for
    a caller that may hand the stream over to a shared writer (`shoal.api.fanout`)."""
    live = Live(services, user_id, task_id, also, kind, since)
    routed = task_id if task_id is not None and not also else None  # only its task's events
    while True:
        try:
            async with services.bus.subscribe(routed) as sub:
                if follow is not None:
                    follow.sub, follow.live, follow.ready = sub, live, False
                items: list[dict[str, Any]] = []
                async for event in _replay(services, user_id, task_id, live.last):
                    live.last = event.seq
                    items.append(event.wire())
                    if len(items) >= limit:
                        yield items
                        items = []
                if announce:
                    items.append({"type": "caught_up", "data": {"seq": live.last},
                                  "timestamp": utcnow().isoformat().replace("+00:00", "Z")})
                if follow is not None:  # from here on, each yield has used all it took
                    follow.ready = True
                if items or follow is not None:  # (an empty list: the consumer may hand over)
                    yield items
                clock, last = asyncio.get_running_loop().time, float("-inf")
                while events := await sub.take(limit):
                    if linger and len(events) < limit and last + linger > clock() and (
                            not _quieting(events)):
                        events = await _gathered(sub, events, limit, last + linger, clock)
                    items = await live.wanted(events, None if routed is None else sub)
                    if items:
                        yield items
                        last = clock()
                return
        except Lagged:
            continue  # fell behind the bus: resubscribe and catch up from the store


@dataclass(slots=True)
class Follow:
    """Where a stream is, for its consumer: its bus subscription, its live half, and whether
    it is live (`ready`: its replay is done, and at each of its yields it has used every
    event it took from `sub`, so `live.last` is the last number it went through)."""

    sub: Subscription | None = None
    live: Live | None = None
    ready: bool = False


class Live:
    """The live half of one stream: which of the bus's events go to its client, in order, with
    the gaps in the log's order filled from the store."""

    def __init__(self, services: Services, user_id: uuid.UUID, task_id: uuid.UUID | None,
                 also: frozenset[str], kind: StreamKind, last: int) -> None:
        self.services, self.user_id, self.task_id, self.also = services, user_id, task_id, also
        self.kind, self.last = kind, last
        self.fanout_lag = services.runtime.metrics.delivered_all

    async def wanted(self, events: Sequence[Event],
                     routed: Subscription | None = None) -> list[dict[str, Any]]:
        """The items of `events` (taken from the bus in order) that go to the client. From a
        subscription `routed` to the task, a gap between its events' numbers is other tasks'
        events, and is filled from the store only when the bus saw a gap in the log there."""
        out: list[dict[str, Any]] = []
        stamps: list[datetime] = []
        user_id, task_id, also = self.user_id, self.task_id, self.also
        user, task = user_id.int, -1 if task_id is None else task_id.int  # (see `seen_by`)
        for event in events:
            seq = event.seq
            if not seq:  # (`live_only`) streamed text: now or never, outside the order
                if _wanted(event, user_id, task_id, also):
                    out.append(event.wire())
                continue
            if seq <= self.last:
                continue
            if seq > self.last + 1 and (routed is None or routed.gap_through > self.last):
                async for missed in _replay(self.services, user_id, task_id, self.last,
                                            until=seq):
                    self.last = missed.seq
                    stamps.append(missed.timestamp)
                    out.append(missed.wire())
                self.last = max(self.last, seq)
                # Another task's, wanted all the same (`also`): the task's replay skipped it.
                # (A stream of every task replayed it with the others, if it wants it.)
                if (task_id is not None and event.task_id != task_id
                        and _wanted(event, user_id, task_id, also)):
                    out.append(event.wire())
                continue
            self.last = seq
            seen_by, of = event.user_id, event.task_id  # compared by their numbers: UUID's
            if (seen_by is None or seen_by.int == user) and (  # `==` is a Python call
                    task_id is None or (of is not None and of.int == task)
                    or (also and event.type.value in also)):
                stamps.append(event.timestamp)
                out.append(event.wire())
        if stamps:
            self.fanout_lag(self.kind, stamps, utcnow())
        return out

    def wanted_now(self, events: Sequence[Event],
                   routed: Subscription | None = None) -> list[dict[str, Any]] | None:
        """`wanted`'s answer without suspending, when it reads nothing from the store (no gap
        in `events` to fill: then `wanted` never awaits, and its coroutine is run here to its
        end in one step); None, with nothing taken, when it would read."""
        last = self.last
        for event in events:  # the gaps `wanted` would fill, found as it finds them
            seq = event.seq
            if not seq or seq <= last:
                continue
            if seq > last + 1 and (routed is None or routed.gap_through > last):
                return None
            last = seq
        step = self.wanted(events, routed)
        try:
            step.send(None)
        except StopIteration as done:
            found: list[dict[str, Any]] = done.value
            return found
        step.close()
        raise RuntimeError("Live.wanted suspended with no gap to fill")


async def _gathered(sub: Subscription, events: list[Event], limit: int, until: float,
                    clock: Callable[[], float]) -> list[Event]:
    """`events` and what else the bus hands `sub` until `until` (by `clock`), in order, up to
    `limit` in all; sooner once an event after which its task goes quiet comes (`QUIETING`).

    Meanwhile the publisher hands its events over in its own turn (`Subscription.inline`: the
    queue is empty, `events` took all of it), so a publish wakes nobody; one that holds a
    `QUIETING` event, or fills the list (or would overfill it: then it is queued), ends the
    wait. The caller took fewer than `limit`, so nothing is queued when the wait begins."""
    woken = asyncio.get_running_loop().create_future()
    held: list[Event] = []
    room = limit - len(events)

    def hand(more: Sequence[Event]) -> bool:  # (the publisher's turn: `QueueSubscription`)
        taken = len(held) + len(more) <= room  # else queued, and taken below or next
        if taken:
            held.extend(more)
        if not woken.done() and (not taken or len(held) == room or _quieting(more)):
            woken.set_result(None)
        return taken

    sub.inline = hand
    try:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(until - clock()):
                await woken
    finally:
        sub.inline = None
    events = [*events, *held]
    if len(events) < limit and not sub.empty():  # (`take` returns at once: something is)
        events = [*events, *await sub.take(limit - len(events))]
    return events


def _quieting(events: Sequence[Event]) -> bool:
    """Whether `events` hold one after which their task goes quiet (`QUIETING`)."""
    return any(event.type in QUIETING for event in events)


def _wanted(
    event: Event, user_id: uuid.UUID, task_id: uuid.UUID | None, also: frozenset[str]
) -> bool:
    return event.visible_to(user_id) and (
        task_id is None or event.task_id == task_id or event.type.value in also)


async def _replay(
    services: Services, user_id: uuid.UUID, task_id: uuid.UUID | None, since: int,
    until: int | None = None,
) -> AsyncIterator[Event]:
    while True:
        async with services.db.connection() as conn:
            page = await events_since(conn, since, user_id=user_id, task_id=task_id, limit=PAGE)
        for event in page:
            if until is not None and event.seq > until:
                return
            since = event.seq
            yield event
        if len(page) < PAGE:
            return


T = TypeVar("T")


@contextlib.asynccontextmanager
async def _pumped(stream: AsyncIterator[T], size: int
                  ) -> AsyncIterator[Mailbox[T | BaseException | None]]:
    """A queue that a task fills with `stream`'s items, then None at its end (or the exception
    that ended it); the task stops when the block is left."""
    queue: Mailbox[T | BaseException | None] = Mailbox(size)

    async def pump() -> None:
        try:
            async for item in stream:
                await queue.put(item)
        except Exception as exc:
            await queue.put(exc)
        else:
            await queue.put(None)
        finally:  # stopped while waiting to queue an item: close the stream (its bus feed) now
            if isinstance(stream, AsyncGenerator):
                await stream.aclose()

    task = asyncio.create_task(pump())
    try:
        yield queue
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task


async def with_keepalive(
    stream: AsyncIterator[T], *, interval: float, ahead: int = 256
) -> AsyncIterator[T | None]:
    """Items of `stream`, with a `None` whenever nothing came for `interval` seconds; at most
    `ahead` items are read before they are taken."""
    async with _pumped(stream, ahead) as queue:
        while True:
            if not queue.empty():  # (no timer for an item already there)
                item = queue.get_nowait()
            else:
                try:
                    item = await asyncio.wait_for(queue.get(), timeout=interval)
                except TimeoutError:
                    yield None
                    continue
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
