"""Commands for a task another control-plane copy drives, carried to that copy (ADR 0038).

A person's command (cancel, or a checkpoint decision: approve, reject, correct, answer) may reach
any copy behind a load balancer, but only the copy holding the task's claim may decide it. The
copy that received it, finding the task claimed by a live copy, hands the command to that copy
over Redis and waits for its answer: done (the task as that copy left it is in the store), or
the error that copy's own decision raised (404, 409, 422 …), raised here as the same error. A
copy that does not answer within `WAIT` (stopped, stalled, cut off) keeps its claim only until
the claim expires; the receiving copy then takes the task over and decides it itself, as a
copy starting up would. So the person gets an answer, never a 503 to retry by hand.

On Redis, each copy reads its own list (`<namespace>:commands:<copy>`, `BLPOP`) and answers on
a list named by the request (`<namespace>:answers:<id>`, kept a minute). A request carries its
deadline: a copy restarted under the same name skips the requests nobody waits for any more.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import redis.asyncio as aioredis
import structlog
from redis.exceptions import RedisError

from shoal import errors
from shoal.bus import keys
from shoal.bus.inbox import reading
from shoal.engine.inputs import CheckpointDecision
from shoal.errors import ShoalError

log = structlog.get_logger(__name__)
WAIT = 5.0  # seconds a copy waits for the owner's answer before it waits out the claim
ANSWER_TTL = 60  # seconds an answer is kept for the copy that asked
_ERRORS: dict[str, type[ShoalError]] = {cls.__name__: cls for cls in (
    errors.NotFound, errors.Conflict, errors.StaleAttempt, errors.InvalidInput,
    errors.InvalidGraph, errors.UnstorableText, errors.Unauthorized, errors.Forbidden,
    errors.RateLimited, errors.Unavailable, errors.BudgetExceeded, errors.ShoalError)}


@dataclass(frozen=True, slots=True)
class Command:
    """A person's command for one task: cancel it (`decision` None) or decide a checkpoint."""

    task_id: uuid.UUID
    user_id: uuid.UUID
    decision: CheckpointDecision | None = None

    def to_json(self) -> dict[str, Any]:
        decided = None if self.decision is None else {
            **asdict(self.decision), "checkpoint_id": str(self.decision.checkpoint_id),
            "user_id": _text(self.decision.user_id),
            "subtask_id": _text(self.decision.subtask_id),
            "reference_files": list(self.decision.reference_files)}
        return {"task_id": str(self.task_id), "user_id": str(self.user_id), "decision": decided}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Command:
        decided = data.get("decision")
        decision = None if decided is None else CheckpointDecision(**{
            **decided, "checkpoint_id": uuid.UUID(decided["checkpoint_id"]),
            "user_id": _uuid(decided.get("user_id")),
            "subtask_id": _uuid(decided.get("subtask_id")),
            "reference_files": tuple(decided.get("reference_files") or ())})
        return cls(uuid.UUID(data["task_id"]), uuid.UUID(data["user_id"]), decision)


@dataclass(frozen=True, slots=True)
class Answer:
    """What the owning copy made of a command: done, or the error its decision raised."""

    error: ShoalError | None = None

    def to_json(self) -> dict[str, Any]:
        if self.error is None:
            return {"ok": True}
        return {"ok": False, "kind": type(self.error).__name__, "message": self.error.message,
                "code": self.error.code, "details": self.error.details,
                "retry_after": self.error.retry_after}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Answer:
        if data.get("ok"):
            return cls()
        kind = _ERRORS.get(str(data.get("kind")), ShoalError)
        return cls(kind(str(data.get("message")), code=data.get("code"),
                        details=data.get("details"), retry_after=data.get("retry_after")))


Handler = Callable[[Command], Awaitable[Answer]]


class Forwarder(Protocol):
    """How copies hand each other commands."""

    async def send(self, owner: str, command: Command, within: float) -> Answer | None:
        """`owner`'s answer to `command`, or None when it did not answer within `within` s."""
        ...

    def serve(self, owner: str, handle: Handler) -> contextlib.AbstractAsyncContextManager[None]:
        """While entered, answer the commands sent to `owner` with `handle`."""
        ...


class RedisForwarder:
    """Commands over Redis lists (one per copy), answers on one list per request."""

    def __init__(self, url: str, *, namespace: str = keys.NAMESPACE) -> None:
        self._redis = aioredis.Redis.from_url(url, decode_responses=True)
        self._namespace = namespace

    async def send(self, owner: str, command: Command, within: float) -> Answer | None:
        request = uuid.uuid4().hex
        body = json.dumps({"id": request, "deadline": time.time() + within,
                           "command": command.to_json()})
        try:
            inbox = keys.command_inbox(self._namespace, owner)
            await self._redis.rpush(inbox, body)
            await self._redis.expire(inbox, ANSWER_TTL)
            answers = keys.command_answers(self._namespace, request)
            found = await self._redis.blpop([answers], timeout=within)
        except RedisError as exc:
            log.warning("forwarding.unreachable", owner=owner, error=str(exc))
            return None
        if found is None:
            return None
        return Answer.from_json(json.loads(found[1]))

    @contextlib.asynccontextmanager
    async def serve(self, owner: str, handle: Handler) -> AsyncIterator[None]:
        running: set[asyncio.Task[None]] = set()

        async def take(raw: str | bytes) -> None:  # concurrently: a slow decision waits alone
            job = asyncio.create_task(self._answer(raw, handle))
            running.add(job)
            job.add_done_callback(running.discard)

        try:
            async with reading(self._redis, keys.command_inbox(self._namespace, owner), take,
                               what="forwarding"):
                yield
        finally:
            await self._redis.aclose()

    async def _answer(self, raw: str | bytes, handle: Handler) -> None:
        try:
            request = json.loads(raw)
            if float(request["deadline"]) < time.time():
                return  # nobody waits for it any more
            command = Command.from_json(request["command"])
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("forwarding.bad_request", error=str(exc))
            return
        answer = await handle(command)
        key = keys.command_answers(self._namespace, str(request["id"]))
        try:
            await self._redis.rpush(key, json.dumps(answer.to_json(), default=str))
            await self._redis.expire(key, ANSWER_TTL)
        except RedisError as exc:
            log.warning("forwarding.answer_lost", error=str(exc))


def _text(value: uuid.UUID | None) -> str | None:
    return None if value is None else str(value)


def _uuid(value: str | None) -> uuid.UUID | None:
    return None if value is None else uuid.UUID(value)
