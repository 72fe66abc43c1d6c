"""How copies share their workers (ADR 0039): a directory of who is connected where, and the
messages one copy carries for another between a worker and the copy that owns the attempt.

A worker connects to whichever copy the load balancer picks; the task it could run is driven by
whichever copy holds its claim. Each copy writes a card for every worker connected to it in one
Redis hash (`<namespace>:fleet`: worker id → where, slots, tools, how many attempts it runs), and
reads the others' cards to place work on their workers too. Messages travel on one Redis list
per copy (`<namespace>:relay:<copy>`, read with `BLPOP`):

- `ToWorker`: a frame the owner sends to a worker connected elsewhere (attempts to run, acks,
  cancels), passed on as it is by the copy the worker is connected to;
- `FromWorker`: a frame a worker sent about an attempt another copy owns (started, a log line,
  streamed text, spending, a heartbeat for those attempts, the result with its files already
  stored), passed to the owner, which handles it as if the worker were connected to it;
- `Refused`: the worker is not (or no longer) connected to the copy asked to pass attempts on,
  or has no free slot for them (the owner places them elsewhere or later, no try spent);
- `Left`: the worker's socket closed.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Annotated, Any, Literal, Protocol

import redis.asyncio as aioredis
import structlog
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError
from redis.exceptions import RedisError

from shoal.bus import keys
from shoal.bus.inbox import reading

log = structlog.get_logger(__name__)
INBOX_TTL = 60  # seconds a copy's list lives without a reader (a stopped copy's, say)


class _Envelope(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class WorkerCard(_Envelope):
    """A worker as the copy it is connected to describes it to the others."""

    worker_id: uuid.UUID
    copy_name: str  # the copy the worker is connected to
    name: str
    machine_id: str
    tools: dict[str, bool]
    slots: int
    running: int
    features: list[str] = Field(default_factory=list)
    at: float  # when the card was written (seconds since the epoch)


class ToWorker(_Envelope):
    """A frame for a worker connected to the receiving copy, from the copy that owns it."""

    kind: Literal["to_worker"] = "to_worker"
    worker_id: uuid.UUID
    owner: str
    text: str


class FromWorker(_Envelope):
    """A worker's frame about attempts the receiving copy owns, and the card of that worker;
    a result's files are stored already (`manifest`, `rejected`)."""

    kind: Literal["from_worker"] = "from_worker"
    card: WorkerCard
    text: str
    manifest: list[dict[str, Any]] = Field(default_factory=list)
    rejected: list[dict[str, Any]] = Field(default_factory=list)


class Refused(_Envelope):
    """Attempts the receiving copy owns could not be passed on: the worker is not connected,
    or (`full`) has no free slot for them."""

    kind: Literal["refused"] = "refused"
    worker_id: uuid.UUID
    attempts: list[uuid.UUID]
    reason: str
    full: bool = False


class Left(_Envelope):
    """A worker running attempts the receiving copy owns disconnected from `via`."""

    kind: Literal["left"] = "left"
    worker_id: uuid.UUID
    via: str


Envelope = Annotated[ToWorker | FromWorker | Refused | Left, Field(discriminator="kind")]
_ENVELOPE: TypeAdapter[Envelope] = TypeAdapter(Envelope)
Handler = Callable[[Envelope], Awaitable[None]]


class Relay(Protocol):
    """How copies share workers: the directory and the messages."""

    async def post(self, copy_name: str, *envelopes: Envelope) -> None:
        """Put `envelopes` in `copy_name`'s list, in order (lost, with a warning, if Redis is
        away)."""
        ...

    async def publish(self, card: WorkerCard) -> None:
        """Write (or rewrite) a worker's card."""
        ...

    async def withdraw(self, worker_id: uuid.UUID, copy_name: str) -> None:
        """Remove a worker's card, if `copy_name` wrote the one there."""
        ...

    async def cards(self) -> list[WorkerCard]:
        """Every worker's card."""
        ...

    def serve(self, copy_name: str,
              handle: Handler) -> contextlib.AbstractAsyncContextManager[None]:
        """While entered, hand every envelope sent to `copy_name` to `handle`, in order."""
        ...


class RedisRelay:
    """The directory in one Redis hash, the messages on one Redis list per copy."""

    def __init__(self, url: str, *, namespace: str = keys.NAMESPACE) -> None:
        self._redis = aioredis.Redis.from_url(url, decode_responses=True)
        self._fleet = keys.fleet(namespace)
        self._namespace = namespace

    async def post(self, copy_name: str, *envelopes: Envelope) -> None:
        key = keys.relay_inbox(self._namespace, copy_name)
        try:
            async with self._redis.pipeline(transaction=False) as pipe:
                pipe.rpush(key, *(e.model_dump_json() for e in envelopes))
                pipe.expire(key, INBOX_TTL)
                await pipe.execute()
        except RedisError as exc:  # the worker re-sends what matters; leases cover the rest
            log.warning("relay.unreachable", copy=copy_name, error=str(exc))

    async def publish(self, card: WorkerCard) -> None:
        try:
            await self._redis.hset(self._fleet, str(card.worker_id), card.model_dump_json())
        except RedisError as exc:
            log.warning("relay.card_not_written", error=str(exc))

    async def withdraw(self, worker_id: uuid.UUID, copy_name: str) -> None:
        try:
            raw = await self._redis.hget(self._fleet, str(worker_id))
            card = _card(raw) if raw is not None else None
            if card is not None and card.copy_name == copy_name:  # not a newer copy's card
                await self._redis.hdel(self._fleet, str(worker_id))
        except RedisError as exc:
            log.warning("relay.card_not_removed", error=str(exc))

    async def cards(self) -> list[WorkerCard]:
        try:
            raw = await self._redis.hgetall(self._fleet)
        except RedisError as exc:
            log.warning("relay.directory_unreachable", error=str(exc))
            return []
        return [card for text in raw.values() if (card := _card(text)) is not None]

    @contextlib.asynccontextmanager
    async def serve(self, copy_name: str, handle: Handler) -> AsyncIterator[None]:
        async def take(raw: str | bytes) -> None:
            try:
                envelope = _ENVELOPE.validate_json(raw)
            except ValidationError as exc:
                log.warning("relay.bad_envelope", error=str(exc.errors(include_input=False)))
                return
            try:
                await handle(envelope)
            except Exception:  # one bad envelope must not stop the copy's relay
                log.exception("relay.handler_failed", kind=envelope.kind)

        try:
            async with reading(self._redis, keys.relay_inbox(self._namespace, copy_name), take,
                               what="relay"):
                yield
        finally:
            await self._redis.aclose()


def card_age(card: WorkerCard) -> float:
    """Seconds since the card was written."""
    return time.time() - card.at


def _card(text: str | bytes) -> WorkerCard | None:
    try:
        return WorkerCard.model_validate_json(text)
    except ValidationError:
        return None
