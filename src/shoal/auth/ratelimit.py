"""Fixed-window rate limits per key (an IP, a user, a login name).

A window opens at a key's first hit and lasts `window` seconds; up to `limit` hits pass in it,
the rest raise `RateLimited` with `retry_after` set to when the window closes. The in-memory
limiter serves one process; the Redis limiter shares counts between control-plane copies.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import Protocol

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from shoal.bus import keys
from shoal.errors import RateLimited

log = logging.getLogger(__name__)

SWEEP_INTERVAL = 60.0
"""Seconds between purges of closed windows from the in-memory limiter."""


class RateLimiter(Protocol):
    """Count a hit against a key and refuse it when the key is over its limit."""

    async def hit(self, key: str, *, limit: int, window: float) -> None:
        """Record one hit for `key`; raise `RateLimited` if it is past `limit` in `window` s."""
        ...

    async def close(self) -> None:
        """Let go of what the limiter holds (its connections); called once, when the app stops."""
        ...


class MemoryRateLimiter:
    """A `RateLimiter` for one process, with an injectable monotonic clock."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._windows: dict[str, tuple[float, int]] = {}  # key → (window end, hits)
        self._next_sweep = 0.0

    async def hit(self, key: str, *, limit: int, window: float) -> None:
        """Record one hit for `key`; raise `RateLimited` if it is past `limit` in `window` s."""
        _check_arguments(limit, window)
        now = self._clock()
        self._sweep(now)
        end, hits = self._windows.get(key, (now, 0))
        if now >= end:
            end, hits = now + window, 0
        self._windows[key] = (end, hits + 1)
        if hits + 1 > limit:
            raise _rate_limited(end - now, limit=limit, window=window)

    async def close(self) -> None:
        """Nothing to let go of: the counters are this process's memory."""

    def _sweep(self, now: float) -> None:
        if now < self._next_sweep:
            return
        self._windows = {k: v for k, v in self._windows.items() if v[0] > now}
        self._next_sweep = now + SWEEP_INTERVAL


class RedisRateLimiter:
    """A `RateLimiter` whose counters live in Redis, shared by every control-plane copy.

    A limiter made with `from_url` owns its client and closes it in `close()`; one given a
    `client` leaves it to the caller. If Redis cannot be reached the hit is allowed and a
    warning logged: an outage of the counter store should not take the API down with it.
    """

    def __init__(self, client: aioredis.Redis, *, namespace: str = keys.NAMESPACE,
                 owns_client: bool = False) -> None:
        self._client = client
        self._namespace = namespace
        self._owns_client = owns_client

    @classmethod
    def from_url(cls, url: str, *, namespace: str = keys.NAMESPACE) -> RedisRateLimiter:
        """A limiter on its own client of the Redis at `url`."""
        return cls(aioredis.Redis.from_url(url), namespace=namespace, owns_client=True)

    async def close(self) -> None:
        """Close the client, if this limiter made it."""
        if self._owns_client:
            await self._client.aclose()

    async def hit(self, key: str, *, limit: int, window: float) -> None:
        """Record one hit for `key`; raise `RateLimited` if it is past `limit` in `window` s."""
        _check_arguments(limit, window)
        name = keys.rate_limit_key(key, self._namespace)
        window_ms = max(1, math.ceil(window * 1000))
        try:
            # One transaction, so a counter can never be left without an expiry.
            async with self._client.pipeline(transaction=True) as pipe:
                pipe.incr(name)
                pipe.pexpire(name, window_ms, nx=True)
                pipe.pttl(name)
                hits, _, ttl_ms = await pipe.execute()
        except (RedisError, OSError) as exc:
            log.warning("Rate limit not enforced: Redis is unreachable (%s)", exc)
            return
        if hits > limit:
            retry_after = ttl_ms / 1000 if ttl_ms > 0 else window
            raise _rate_limited(retry_after, limit=limit, window=window)


def _check_arguments(limit: int, window: float) -> None:
    if limit < 1 or window <= 0:
        raise ValueError(f"A rate limit needs limit >= 1 and window > 0, got {limit}, {window}.")


def _rate_limited(retry_after: float, *, limit: int, window: float) -> RateLimited:
    return RateLimited(
        f"Too many requests: at most {limit} per {window:g} s. "
        f"Try again in {math.ceil(retry_after)} s.",
        retry_after=retry_after,
        details={"limit": limit, "window": window},
    )
