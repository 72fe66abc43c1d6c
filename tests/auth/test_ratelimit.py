"""Fixed-window rate limiting, in memory and in Redis.

The shared behaviour runs against both limiters; Redis ones need a real Redis
(`SHOAL_TEST_REDIS_URL`) and are skipped with the reason shown, or fail under `CI=true`.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from shoal.auth.ratelimit import MemoryRateLimiter, RateLimiter, RedisRateLimiter
from shoal.bus import keys
from shoal.errors import RateLimited


class FakeClock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def redis_client(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    """A client on the test Redis, closed after the test."""
    client = aioredis.Redis.from_url(redis_url)
    yield client
    await client.aclose()


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
def limiter(request: pytest.FixtureRequest) -> RateLimiter:
    """Each limiter implementation in turn."""
    if request.param == "memory":
        return MemoryRateLimiter()
    return RedisRateLimiter(request.getfixturevalue("redis_client"))


@pytest.fixture
def key() -> str:
    """A key no other test uses."""
    return f"test:{uuid.uuid4().hex}"


async def test_hits_up_to_the_limit_pass(limiter: RateLimiter, key: str) -> None:
    """`limit` hits inside one window are allowed."""
    for _ in range(3):
        await limiter.hit(key, limit=3, window=60)


async def test_hit_past_the_limit_is_refused_with_retry_after(
    limiter: RateLimiter, key: str
) -> None:
    """The hit after the limit raises `RateLimited` saying when to come back."""
    for _ in range(3):
        await limiter.hit(key, limit=3, window=60)
    with pytest.raises(RateLimited, match="at most 3 per 60 s") as caught:
        await limiter.hit(key, limit=3, window=60)
    assert caught.value.retry_after is not None
    assert 0 < caught.value.retry_after <= 60
    assert caught.value.retryable


async def test_keys_are_counted_separately(limiter: RateLimiter, key: str) -> None:
    """One key at its limit does not limit another."""
    await limiter.hit(key, limit=1, window=60)
    await limiter.hit(key + ":other", limit=1, window=60)
    with pytest.raises(RateLimited):
        await limiter.hit(key, limit=1, window=60)


@pytest.mark.parametrize(("limit", "window"), [(0, 60), (1, 0), (1, -1)])
async def test_nonsense_limits_are_a_programming_error(
    limiter: RateLimiter, key: str, limit: int, window: float
) -> None:
    """A limit below 1 or a window of no length raises `ValueError`."""
    with pytest.raises(ValueError, match="limit >= 1"):
        await limiter.hit(key, limit=limit, window=window)


async def test_memory_window_reopens_after_it_ends() -> None:
    """Once the window has passed, the key may hit again."""
    clock = FakeClock()
    limiter = MemoryRateLimiter(clock=clock)
    await limiter.hit("k", limit=1, window=10)
    clock.now += 9.99
    with pytest.raises(RateLimited):
        await limiter.hit("k", limit=1, window=10)
    clock.now += 0.01
    await limiter.hit("k", limit=1, window=10)


async def test_memory_retry_after_is_the_rest_of_the_window() -> None:
    """`retry_after` is the time left until the window that refused the hit closes."""
    clock = FakeClock()
    limiter = MemoryRateLimiter(clock=clock)
    await limiter.hit("k", limit=1, window=10)
    clock.now += 4
    with pytest.raises(RateLimited) as caught:
        await limiter.hit("k", limit=1, window=10)
    assert caught.value.retry_after == pytest.approx(6)


async def test_memory_forgets_closed_windows() -> None:
    """Keys whose windows have closed are purged, so the limiter does not grow forever."""
    clock = FakeClock()
    limiter = MemoryRateLimiter(clock=clock)
    for i in range(100):
        await limiter.hit(f"k{i}", limit=1, window=1)
    clock.now += 3600
    await limiter.hit("fresh", limit=1, window=1)
    assert list(limiter._windows) == ["fresh"]


@pytest.mark.redis
async def test_redis_counter_always_has_an_expiry(redis_client: aioredis.Redis, key: str) -> None:
    """The Redis counter expires with its window, so a key is never locked out for good."""
    await RedisRateLimiter(redis_client).hit(key, limit=5, window=30)
    ttl_ms = await redis_client.pttl(keys.rate_limit_key(key))
    assert 0 < ttl_ms <= 30_000


@pytest.mark.redis
async def test_redis_counts_are_shared_between_copies(redis_url: str, key: str) -> None:
    """Two limiters on separate connections share one count, as two control planes would."""
    first, second = aioredis.Redis.from_url(redis_url), aioredis.Redis.from_url(redis_url)
    try:
        await RedisRateLimiter(first).hit(key, limit=1, window=60)
        with pytest.raises(RateLimited):
            await RedisRateLimiter(second).hit(key, limit=1, window=60)
    finally:
        await first.aclose()
        await second.aclose()


async def test_redis_outage_lets_requests_through(key: str) -> None:
    """When Redis cannot be reached the hit is allowed rather than failing every request."""
    client = aioredis.Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.2)
    try:
        for _ in range(3):
            await RedisRateLimiter(client).hit(key, limit=1, window=60)
    finally:
        await client.aclose()
