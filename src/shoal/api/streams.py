"""Replayable event streams for SSE and WebSocket clients.

Subscribe to the bus first, replay the gap from the store, then follow live events, skipping
any already sent. A gap in live sequence numbers is filled from the store, and a lagging
subscription resyncs from the store, so a client sees every event it may see, once, in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from typing import TYPE_CHECKING, Any

from shoal.bus.base import Lagged
from shoal.events import Event
from shoal.mailbox import Mailbox
from shoal.metrics import StreamKind
from shoal.store.events import events_since, last_seq
from shoal.store.models import utcnow

if TYPE_CHECKING:
    from shoal.api.deps import Services

PAGE = 1000


async def current_seq(services: Services) -> int:
    """The newest sequence number in the log."""
    async with services.db.connection() as conn:
        return await last_seq(conn)


async def replay_then_live(
    services: Services, *, user_id: uuid.UUID, task_id: uuid.UUID | None, since: int,
    kind: StreamKind, also: frozenset[str] = frozenset(), announce: bool = False,
) -> AsyncIterator[dict[str, Any]]:
    """Every event after `since` visible to the user (for one task, if given), then live ones.

    `also`: event types wanted live from every task of the user's, beside the one task's (not
    replayed: a client reads what it missed of those from the API). `announce`: a `caught_up`
    item (no `seq`) once the replay of the past has been sent.

    Each live event, including one fetched from the store to fill a gap in the bus's order, is
    observed in the `kind` stream's fan-out lag; the replay of the past is not."""
    metrics = services.runtime.metrics
    last = since
    while True:
        try:
            async with services.bus.subscribe() as sub:
                async for event in _replay(services, user_id, task_id, last):
                    last = event.seq
                    yield event.wire()
                if announce:
                    yield {"type": "caught_up", "data": {"seq": last},
                           "timestamp": utcnow().isoformat().replace("+00:00", "Z")}
                async for event in sub:
                    if event.live_only:  # streamed text: now or never, outside the order
                        if _wanted(event, user_id, task_id, also):
                            yield event.wire()
                        continue
                    if event.seq <= last:
                        continue
                    if event.seq > last + 1:
                        async for missed in _replay(services, user_id, task_id, last,
                                                    until=event.seq):
                            last = missed.seq
                            metrics.delivered(kind, missed.timestamp, utcnow())
                            yield missed.wire()
                        last = max(last, event.seq)
                        if event.task_id != task_id and _wanted(event, user_id, task_id, also):
                            yield event.wire()  # another task's: the task's replay skips it
                        continue
                    last = event.seq
                    if _wanted(event, user_id, task_id, also):
                        metrics.delivered(kind, event.timestamp, utcnow())
                        yield event.wire()
                return
        except Lagged:
            continue  # fell behind the bus: resubscribe and catch up from the store


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


Pumped = Mailbox[dict[str, Any] | BaseException | None]


@contextlib.asynccontextmanager
async def _pumped(stream: AsyncIterator[dict[str, Any]], size: int) -> AsyncIterator[Pumped]:
    """A queue that a task fills with `stream`'s items, then None at its end (or the exception
    that ended it); the task stops when the block is left."""
    queue: Pumped = Mailbox(size)

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
    stream: AsyncIterator[dict[str, Any]], *, interval: float
) -> AsyncIterator[dict[str, Any] | None]:
    """Items of `stream`, with a `None` whenever nothing came for `interval` seconds."""
    async with _pumped(stream, 256) as queue:
        while True:
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


async def batched(
    stream: AsyncIterator[dict[str, Any]], *, limit: int
) -> AsyncIterator[list[dict[str, Any]]]:
    """Items of `stream` in lists: each holds what arrived while the one before was being
    sent (at most `limit`), so a burst goes out in few frames and a lone item at once."""
    async with _pumped(stream, limit) as queue:
        while True:
            items: list[dict[str, Any]] = []
            item = await queue.get()
            while isinstance(item, dict):
                items.append(item)
                if len(items) >= limit or queue.empty():
                    break
                item = queue.get_nowait()
            if items:
                yield items
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
