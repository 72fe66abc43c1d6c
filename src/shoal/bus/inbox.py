"""Reading one Redis list as a copy's inbox: every item popped (`BLPOP`) and handed on, in order.

Used by the copies' command forwarding (ADR 0038) and their worker relay (ADR 0039). Redis
away: a warning, and another try every second. The loop also ends on a flag, not only on a
cancel, because redis-py can swallow a cancellation that lands inside one of its calls.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import redis.asyncio as aioredis
import structlog
from redis.exceptions import RedisError

log = structlog.get_logger(__name__)
Take = Callable[[str | bytes], Awaitable[None]]


@contextlib.asynccontextmanager
async def reading(redis: aioredis.Redis, key: str, take: Take, *,
                  what: str) -> AsyncIterator[None]:
    """While entered, hand each item of list `key` to `take`; `what` names the reader in logs
    (`<what>.inbox_unreachable`)."""
    stopping = asyncio.Event()

    async def read() -> None:
        while not stopping.is_set():
            try:
                found = await redis.blpop([key], timeout=1)
            except RedisError as exc:  # Redis restarting: try again shortly
                log.warning(f"{what}.inbox_unreachable", key=key, error=str(exc))
                await asyncio.sleep(1.0)
                continue
            if found is not None:
                await take(found[1])

    reader = asyncio.create_task(read())
    try:
        yield
    finally:
        stopping.set()
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader
