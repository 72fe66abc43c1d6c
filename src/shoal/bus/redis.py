"""The Redis event bus: fan-out between control-plane copies over Redis pub/sub.

Each `RedisBus` keeps one publisher connection and one listener task. Every batch of events is
published twice over: whole on the deployment's channel, and each task's share on that task's
channel, with the number of the task's event this copy published before (ADR 0043). The
listener holds the pub/sub connection and subscribes it only to what this copy's subscriptions
follow: a task's channel while one follows that task, the deployment's while one follows every
event. So a copy hears only the tasks its watchers follow. It hands what it hears to a local
`MemoryBus`, which gives every subscriber here the same bounded queue and `Lagged` semantics as
the in-process bus.

Redis is not the source of truth. Whenever the listener may have missed a message — the
connection dropped, redis-py reconnected on its own, a message could not be decoded — every open
subscription gets `Lagged` and its reader re-reads the gap from the store. A subscription routed
to a task learns of a gap in that task's events from the number each message says came before.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import redis.asyncio as aioredis
from redis.asyncio.client import PubSub
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

from shoal.bus import keys
from shoal.bus.channels import Channels, Interest
from shoal.bus.memory import DEFAULT_QUEUE_SIZE, MemoryBus, QueueSubscription
from shoal.errors import Unavailable
from shoal.events import Event, EventType

log = logging.getLogger(__name__)


_encode = json.JSONEncoder(separators=(",", ":")).encode


def encode_event(event: Event) -> str:
    """One event's text, encoded once for every message that carries it; its data's own text,
    where the event has it, goes in as it is."""
    if event.text is None:
        return _encode(_event_to_json(event))
    rest = _encode(_event_to_json(event, with_data=False))  # '{"seq":…,"extra":{…}}'
    return f'{rest[:-1]},"data":{event.text}}}'


def join_events(texts: Sequence[str]) -> str:
    """Events' texts (`encode_event`) as a JSON array, in order."""
    return f"[{','.join(texts)}]"


def encode_events(events: Sequence[Event]) -> str:
    """The deployment channel's message: a JSON array of events, in order."""
    return join_events([encode_event(event) for event in events])


def encode_routed(prev: int | None, texts: Sequence[str]) -> str:
    """A task channel's message: its events (`texts`, each encoded once) and the number of
    the task's event published before them on this copy (None: not known)."""
    return f'{{"prev":{"null" if prev is None else prev},"events":{join_events(texts)}}}'


def decode_routed(payload: str | bytes) -> tuple[int | None, list[Event]]:
    """The number before and the events of a task channel's message; `ValueError` on anything
    malformed."""
    item = json.loads(payload)
    if not isinstance(item, dict) or not isinstance(item.get("events"), list):
        raise ValueError(  # noqa: TRY004 (to the caller, one more kind of bad message)
            "A task's event message must be an object with a list of events.")
    prev = item.get("prev")
    if prev is not None and (not isinstance(prev, int) or isinstance(prev, bool)):
        raise ValueError("A task's event message's `prev` must be a number or null.")
    try:
        return prev, [_event_from_json(event) for event in item["events"]]
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"Malformed event in message: {exc!r}") from exc


def decode_events(payload: str | bytes) -> list[Event]:
    """The events of one pub/sub message; raises `ValueError` on anything malformed."""
    items = json.loads(payload)
    if not isinstance(items, list):
        # ValueError, not TypeError: to the caller it is one more kind of bad message.
        raise ValueError("An event message must be a JSON array of events.")  # noqa: TRY004
    try:
        return [_event_from_json(item) for item in items]
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"Malformed event in message: {exc!r}") from exc


def _event_to_json(event: Event, *, with_data: bool = True) -> dict[str, Any]:
    item = {
        "seq": event.seq,
        "type": event.type.value,
        "timestamp": event.timestamp.isoformat(),
        "task_id": _uuid_text(event.task_id),
        "user_id": _uuid_text(event.user_id),
        "extra": event.extra,
    }
    if with_data:
        item["data"] = event.data
    return item


def _event_from_json(item: dict[str, Any]) -> Event:
    return Event(
        seq=int(item["seq"]),
        type=EventType(item["type"]),
        data=dict(item["data"]),
        timestamp=datetime.fromisoformat(item["timestamp"]),
        task_id=_uuid_value(item.get("task_id")),
        user_id=_uuid_value(item.get("user_id")),
        extra=dict(item.get("extra") or {}),
    )


def _uuid_text(value: uuid.UUID | None) -> str | None:
    return None if value is None else str(value)


def _uuid_value(value: str | None) -> uuid.UUID | None:
    return None if value is None else uuid.UUID(value)


def _cause(exc: Exception) -> Exception:
    """What ended the listener: from the group its reader and steering task raised, a lost
    connection if either saw one, else the first error."""
    if not isinstance(exc, ExceptionGroup):
        return exc
    leaves = [_cause(e) for e in exc.exceptions]
    return next((e for e in leaves if isinstance(e, RedisError | OSError)), leaves[0])


def _redact(url: str) -> str:
    """`url` without its password, fit for error messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = f"{parts.username or ''}:***@{parts.hostname}"
    if parts.port is not None:
        netloc += f":{parts.port}"
    return urlunsplit(parts._replace(netloc=netloc))


PREV_ENTRIES = 100_000
"""Tasks whose last published number a copy remembers; past this it forgets them all (their
next messages say "not known", and their readers check the store once)."""


class RedisBus:
    """An `EventBus` shared by every control-plane copy connected to one Redis channel (and
    its tasks' channels, named after it).

    The listener task starts with the first subscription and is owned by the bus: `close()`
    cancels and awaits it, so always close a bus you opened.

    `prev_ttl`: how long this copy vouches for the last number it published of a task. A task
    has one writer at a time (its claim), and another copy can only take it over after the
    claim lapsed (`claim_ttl`); past that a message says "not known" and its readers check
    the store for the task's events before it.
    """

    def __init__(
        self,
        url: str,
        *,
        channel: str = keys.EVENTS_CHANNEL,
        queue_size: int = DEFAULT_QUEUE_SIZE,
        connect_timeout: float = 10.0,
        client_name: str = "shoal-bus",
        reconnect_delays: tuple[float, float] = (0.05, 5.0),
        prev_ttl: float = 30.0,
    ) -> None:
        self._url = _redact(url)
        self._channel = channel
        self._task_prefix = keys.task_events_channel(channel, "")
        self._home = f"{channel}:home:{uuid.uuid4().hex}"  # keeps the listener subscribed
        self._connect_timeout = connect_timeout
        self._min_delay, self._max_delay = reconnect_delays
        self._delay = self._min_delay
        self._prev_ttl = prev_ttl
        self._prev: dict[uuid.UUID, tuple[int, float]] = {}  # task -> (number, when)
        # One client: its single connection publishes; pub/sub and pipelines take others
        # from its pool.
        self._client = aioredis.Redis.from_url(
            url, single_connection_client=True, client_name=client_name
        )
        self._local = MemoryBus(queue_size=queue_size)
        self._channels = Channels()
        self._listener: asyncio.Task[None] | None = None
        self._last_error: BaseException | None = None
        self._closed = False
        self.heard = 0  # events this copy's listener received (tests and benchmarks read it)

    def task_channel(self, task_id: uuid.UUID) -> str:
        """The channel carrying task `task_id`'s events."""
        return f"{self._task_prefix}{task_id}"

    async def publish(self, events: Sequence[Event]) -> None:
        """Send `events` to every subscriber on every copy (this one included, via Redis)."""
        if self._closed:
            raise Unavailable("The event bus is closed; events can no longer be published.")
        if not events:
            return
        messages = self._messages(events)
        try:
            async with self._client.pipeline(transaction=False) as pipe:
                for channel, payload in messages:
                    pipe.publish(channel, payload)
                await pipe.execute()
        except (RedisError, OSError) as exc:
            # Our own subscribers would miss these events; make them resync from the store.
            self._local.lag_all()
            raise Unavailable(
                f"Could not publish events to Redis at {self._url}: {exc}. Check that Redis "
                "is running and SHOAL_REDIS_URL is right; clients resync from the database."
            ) from exc

    def _messages(self, events: Sequence[Event]) -> list[tuple[str, str]]:
        """The deployment channel's message and each task's, every event encoded once."""
        texts = [encode_event(event) for event in events]
        by_task: dict[uuid.UUID, list[int]] = {}
        for i, event in enumerate(events):
            if event.task_id is not None:
                by_task.setdefault(event.task_id, []).append(i)
        messages = [(self._channel, join_events(texts))]
        now, known, ttl = time.monotonic(), self._prev, self._prev_ttl
        if len(known) > PREV_ENTRIES:
            known.clear()
        for task_id, at in by_task.items():
            last = known.get(task_id)
            prev = last[0] if last is not None and now - last[1] < ttl else None
            top = max(events[i].seq for i in at)
            if top:  # (live-only text has no number: it changes nothing)
                known[task_id] = (top, now)
            messages.append((self.task_channel(task_id),
                             encode_routed(prev, [texts[i] for i in at])))
        return messages

    @contextlib.asynccontextmanager
    async def subscribe(
        self, task_id: uuid.UUID | None = None
    ) -> AsyncIterator[QueueSubscription]:
        """A subscription receiving every event published after the context is entered (only
        task `task_id`'s, if given: `MemoryBus.subscribe`).

        Waits until Redis has confirmed the listener's SUBSCRIBE to the channel (the task's,
        or the deployment's), so a publish right after entering is never missed. Raises
        `Unavailable` if Redis cannot be reached in time.
        """
        channel = self._channel if task_id is None else self.task_channel(task_id)
        wanted = not self._closed
        if wanted:
            interest = self._channels.want(channel)
        try:
            if wanted:
                await self._wait_until_live(interest)
            # No await between the check above and the registration inside `subscribe()`.
            async with self._local.subscribe(task_id) as subscription:
                yield subscription
        finally:
            if wanted:
                self._channels.unwant(channel)

    async def ping(self) -> bool:
        """Whether Redis answers a PING within the connect timeout."""
        if self._closed:
            return False
        try:
            async with asyncio.timeout(self._connect_timeout):
                return bool(await self._client.ping())
        except (RedisError, OSError, TimeoutError):
            return False

    async def close(self) -> None:
        """Stop the listener, end every subscription and close the connections."""
        if self._closed:
            return
        self._closed = True
        await self._local.close()
        self._channels.release_waiters()  # they get ended subscriptions
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.cancel()
            await asyncio.wait([listener])
        await self._client.aclose()

    async def _wait_until_live(self, interest: Interest) -> None:
        if self._listener is None:
            self._listener = asyncio.create_task(self._listen(), name=f"shoal-bus:{self._channel}")
        try:
            async with asyncio.timeout(self._connect_timeout):
                # Re-check after every wake-up: the connection may have dropped again since.
                while not (interest.live.is_set() or self._closed):
                    await interest.live.wait()
        except TimeoutError:
            reason = f" Last error: {self._last_error}." if self._last_error else ""
            raise Unavailable(
                f"Could not subscribe to Redis at {self._url} within "
                f"{self._connect_timeout:g} s.{reason} Check that Redis is running and "
                "SHOAL_REDIS_URL is right."
            ) from None

    async def _listen(self) -> None:
        """Keep one pub/sub connection alive, reconnecting with backoff, until cancelled."""
        while True:
            try:
                await self._listen_once()
            except Exception as exc:  # any failure: drop to backoff, never die silently
                exc = _cause(exc)
                self._last_error = exc
                if isinstance(exc, RedisError | OSError):
                    log.warning("Redis event listener lost its connection: %s", exc)
                else:
                    log.exception("Redis event listener failed; restarting it", exc_info=exc)
            self._local.lag_all()
            await asyncio.sleep(self._delay * random.uniform(0.5, 1.0))
            self._delay = min(self._delay * 2, self._max_delay)

    async def _listen_once(self) -> None:
        """Read one pub/sub connection while steering its channels, until either fails."""
        pubsub = self._client.pubsub()
        try:
            await pubsub.subscribe(self._home)
            async with asyncio.TaskGroup() as group:
                group.create_task(self._read(pubsub))
                group.create_task(self._steer(pubsub))
        finally:
            self._channels.reset()
            await pubsub.aclose()  # type: ignore[no-untyped-call]

    async def _steer(self, pubsub: PubSub) -> None:
        """Subscribe to the channels wanted here and leave those no longer wanted."""
        channels, task = self._channels, asyncio.current_task()
        while True:
            await channels.changed.wait()
            channels.changed.clear()
            add, drop = channels.plan()
            try:
                if drop:  # (first: once a later SUBSCRIBE is confirmed, these are gone)
                    await pubsub.unsubscribe(*drop)
                if add:
                    await pubsub.subscribe(*add)
            except RuntimeError as exc:  # uvloop: the transport closed under the command
                raise RedisConnectionError(f"The connection closed: {exc}") from exc
            if task is not None and task.cancelling():
                # redis-py can swallow a cancellation that arrives while a command is sent
                # (redis/redis-py#2028): honour it here, or closing the bus would hang.
                raise asyncio.CancelledError

    async def _read(self, pubsub: PubSub) -> None:
        home = self._home.encode()
        confirmed = False
        while True:
            message = await pubsub.get_message(timeout=None)
            if message is None:
                continue
            kind = message["type"]
            if kind == "message":
                self._deliver(message["channel"], message["data"])
            elif kind == "subscribe":
                channel = message["channel"]
                if channel == home and not confirmed:
                    confirmed = True
                    self._delay = self._min_delay
                elif channel == home or not self._channels.confirmed(channel.decode()):
                    # redis-py reconnected and re-subscribed by itself: a gap is possible.
                    log.warning("Redis event listener reconnected; subscribers resync")
                    self._local.lag_all()

    def _deliver(self, channel: bytes, payload: bytes) -> None:
        name = channel.decode()
        try:
            if name == self._channel:
                events = decode_events(payload)
                self.heard += len(events)
                self._local.deliver_unrouted(events)
                return
            task_id = uuid.UUID(name.removeprefix(self._task_prefix))
            prev, events = decode_routed(payload)
        except ValueError:
            log.exception("Dropped an undecodable event message; subscribers resync")
            self._local.lag_all()
            return
        self.heard += len(events)
        # The task's events up to `prev` may be missing (all before the first, if unknown).
        first = min((event.seq for event in events if event.seq), default=0)
        gap = 0 if not first else first - 1 if prev is None else min(prev, first - 1)
        self._local.deliver_routed(task_id, events, gap)
