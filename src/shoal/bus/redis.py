"""The Redis event bus: fan-out between control-plane copies over Redis pub/sub.

Each `RedisBus` keeps one publisher connection and one listener task. The listener holds the
pub/sub connection, reads the channel and hands events to a local `MemoryBus`, which gives every
subscriber here the same bounded queue and `Lagged` semantics as the in-process bus.

Redis is not the source of truth. Whenever the listener may have missed a message — the
connection dropped, redis-py reconnected on its own, a message could not be decoded — every open
subscription gets `Lagged` and its reader re-reads the gap from the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import uuid
from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from shoal.bus import keys
from shoal.bus.memory import DEFAULT_QUEUE_SIZE, MemoryBus, QueueSubscription
from shoal.errors import Unavailable
from shoal.events import Event, EventType

log = logging.getLogger(__name__)


def encode_events(events: Sequence[Event]) -> str:
    """One pub/sub message: a JSON array of events, in order."""
    return json.dumps([_event_to_json(event) for event in events], separators=(",", ":"))


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


def _event_to_json(event: Event) -> dict[str, Any]:
    return {
        "seq": event.seq,
        "type": event.type.value,
        "data": event.data,
        "timestamp": event.timestamp.isoformat(),
        "task_id": _uuid_text(event.task_id),
        "user_id": _uuid_text(event.user_id),
        "extra": event.extra,
    }


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


def _redact(url: str) -> str:
    """`url` without its password, fit for error messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = f"{parts.username or ''}:***@{parts.hostname}"
    if parts.port is not None:
        netloc += f":{parts.port}"
    return urlunsplit(parts._replace(netloc=netloc))


class RedisBus:
    """An `EventBus` shared by every control-plane copy connected to one Redis channel.

    The listener task starts with the first subscription and is owned by the bus: `close()`
    cancels and awaits it, so always close a bus you opened.
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
    ) -> None:
        self._url = _redact(url)
        self._channel = channel
        self._connect_timeout = connect_timeout
        self._min_delay, self._max_delay = reconnect_delays
        self._delay = self._min_delay
        # One client: its single connection publishes; pub/sub takes a second from its pool.
        self._client = aioredis.Redis.from_url(
            url, single_connection_client=True, client_name=client_name
        )
        self._local = MemoryBus(queue_size=queue_size)
        self._listening = asyncio.Event()
        self._listener: asyncio.Task[None] | None = None
        self._last_error: BaseException | None = None
        self._closed = False

    async def publish(self, events: Sequence[Event]) -> None:
        """Send `events` to every subscriber on every copy (this one included, via Redis)."""
        if self._closed:
            raise Unavailable("The event bus is closed; events can no longer be published.")
        if not events:
            return
        try:
            await self._client.publish(self._channel, encode_events(events))
        except (RedisError, OSError) as exc:
            # Our own subscribers would miss these events; make them resync from the store.
            self._local.lag_all()
            raise Unavailable(
                f"Could not publish events to Redis at {self._url}: {exc}. Check that Redis "
                "is running and SHOAL_REDIS_URL is right; clients resync from the database."
            ) from exc

    @contextlib.asynccontextmanager
    async def subscribe(
        self, task_id: uuid.UUID | None = None
    ) -> AsyncIterator[QueueSubscription]:
        """A subscription receiving every event published after the context is entered (only
        task `task_id`'s, if given: `MemoryBus.subscribe`).

        Waits until the listener's SUBSCRIBE is confirmed by Redis, so a publish right after
        entering is never missed. Raises `Unavailable` if Redis cannot be reached in time.
        """
        if not self._closed:
            await self._wait_until_listening()
        # No await between the check above and the registration inside `subscribe()`.
        async with self._local.subscribe(task_id) as subscription:
            yield subscription

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
        self._listening.set()  # release subscribers still waiting: they get ended subscriptions
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.cancel()
            await asyncio.wait([listener])
        await self._client.aclose()

    async def _wait_until_listening(self) -> None:
        if self._listener is None:
            self._listener = asyncio.create_task(self._listen(), name=f"shoal-bus:{self._channel}")
        try:
            async with asyncio.timeout(self._connect_timeout):
                # Re-check after every wake-up: the connection may have dropped again since.
                while not (self._listening.is_set() or self._closed):
                    await self._listening.wait()
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
                self._last_error = exc
                if isinstance(exc, RedisError | OSError):
                    log.warning("Redis event listener lost its connection: %s", exc)
                else:
                    log.exception("Redis event listener failed; restarting it")
            self._listening.clear()
            self._local.lag_all()
            await asyncio.sleep(self._delay * random.uniform(0.5, 1.0))
            self._delay = min(self._delay * 2, self._max_delay)

    async def _listen_once(self) -> None:
        pubsub = self._client.pubsub()
        try:
            await pubsub.subscribe(self._channel)
            confirmed = False
            while True:
                message = await pubsub.get_message(timeout=None)
                if message is None:
                    continue
                if message["type"] == "subscribe":
                    if confirmed:
                        # redis-py reconnected and re-subscribed by itself: a gap is possible.
                        log.warning("Redis event listener reconnected; subscribers resync")
                        self._local.lag_all()
                    confirmed = True
                    self._delay = self._min_delay
                    self._listening.set()
                elif message["type"] == "message":
                    self._deliver(message["data"])
        finally:
            self._listening.clear()
            await pubsub.aclose()  # type: ignore[no-untyped-call]

    def _deliver(self, payload: bytes) -> None:
        try:
            events = decode_events(payload)
        except ValueError:
            log.exception("Dropped an undecodable event message; subscribers resync")
            self._local.lag_all()
            return
        self._local.deliver(events)
