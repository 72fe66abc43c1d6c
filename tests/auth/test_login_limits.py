"""Sign-in is limited per client address and per username (from any address), each with 429
and `Retry-After`, against a real control plane: clients come from several loopback
addresses (127.a.b.2, 127.a.b.3, …), which the server sees as different clients. Every
attempt counts, right or wrong, and one past a limit is refused before the password is
checked."""

from __future__ import annotations

import secrets
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from pathlib import Path

import httpx
import pytest

from shoal import admin
from shoal.api.server import RunningServer, running_server
from shoal.config import Settings
from tests.auth.conftest import PASSWORD
from tests.conftest import REDIS_URL, make_settings, require_service

LOGIN = "/api/v1/auth/login"
From = Callable[[int], httpx.AsyncClient]


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
async def limited(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[RunningServer, Settings]]:
    """A control plane allowing 3 attempts a minute per username and 4 per address, its
    counters in memory or in Redis (shared by copies)."""
    extra: dict[str, object] = {}
    if request.param == "redis":
        require_service(REDIS_URL, "Redis", "SHOAL_TEST_REDIS_URL")
        extra["redis_url"] = REDIS_URL
    settings = make_settings(tmp_path, login_account_rate_limit_per_minute=3,
                             login_rate_limit_per_minute=4, **extra)
    async with running_server(settings) as srv:
        yield srv, settings


@pytest.fixture
async def from_address(limited: tuple[RunningServer, Settings]) -> AsyncIterator[From]:
    """`from_address(n)`: a client whose requests come from 127.a.b.n, with a and b drawn
    for each test (Redis counters outlive a test and a run)."""
    srv, _ = limited
    network = f"127.{secrets.randbelow(254) + 1}.{secrets.randbelow(256)}"
    async with AsyncExitStack() as stack:
        clients: dict[int, httpx.AsyncClient] = {}

        def client(n: int) -> httpx.AsyncClient:
            if n not in clients:
                transport = httpx.AsyncHTTPTransport(local_address=f"{network}.{n}")
                clients[n] = httpx.AsyncClient(base_url=srv.url, transport=transport,
                                               timeout=30)
                stack.push_async_callback(clients[n].aclose)
            return clients[n]

        yield client


def unique(name: str) -> str:
    """A username no other test uses (Redis counters outlive a test)."""
    return f"{name}-{uuid.uuid4().hex[:8]}"


async def attempt(client: httpx.AsyncClient, name: str, password: str) -> httpx.Response:
    return await client.post(LOGIN, json={"username": name, "password": password})


def assert_limited(resp: httpx.Response, window: int = 60) -> None:
    """429 in the error shape, with a `Retry-After` within the window."""
    assert resp.status_code == 429, resp.text
    assert 1 <= int(resp.headers["retry-after"]) <= window
    body = resp.json()
    assert body["error"] == "rate_limited"
    assert body["details"]["limit"] >= 1


async def test_one_username_is_limited_whatever_the_address(
    limited: tuple[RunningServer, Settings], from_address: From
) -> None:
    """Three wrong passwords from three addresses; the fourth attempt, from a fourth address
    and with the right password, is refused with 429 (the password is not even checked).
    Another username from those addresses is not limited by it."""
    srv, settings = limited
    ada, bob = unique("ada"), unique("bob")
    for name in (ada, bob):
        await admin.create_user(srv.services.db, settings, username=name, password=PASSWORD)
    for n in (2, 3, 4):
        assert (await attempt(from_address(n), ada, "wrong-password")).status_code == 401
    assert_limited(await attempt(from_address(5), ada, PASSWORD))
    assert (await attempt(from_address(2), bob, PASSWORD)).status_code == 200


async def test_successful_sign_ins_count_too(
    limited: tuple[RunningServer, Settings], from_address: From
) -> None:
    """Right passwords count like wrong ones: the fourth sign-in in a minute is refused."""
    srv, settings = limited
    ada = unique("ada")
    await admin.create_user(srv.services.db, settings, username=ada, password=PASSWORD)
    for n in (2, 3, 4):
        assert (await attempt(from_address(n), ada, PASSWORD)).status_code == 200
    assert_limited(await attempt(from_address(5), ada, PASSWORD))


async def test_unknown_usernames_are_limited_alike(
    limited: tuple[RunningServer, Settings], from_address: From
) -> None:
    """A username with no account is limited like one with: the 429 tells nothing of
    which names exist."""
    ghost = unique("ghost")
    for n in (2, 3, 4):
        assert (await attempt(from_address(n), ghost, PASSWORD)).status_code == 401
    assert_limited(await attempt(from_address(5), ghost, PASSWORD))


async def test_one_address_is_limited_whatever_the_username(
    limited: tuple[RunningServer, Settings], from_address: From
) -> None:
    """Four attempts from one address on four usernames; the fifth, on yet another, is
    refused with 429; another address still signs in."""
    srv, settings = limited
    ada = unique("ada")
    await admin.create_user(srv.services.db, settings, username=ada, password=PASSWORD)
    for _ in range(4):
        assert (await attempt(from_address(6), unique("x"), PASSWORD)).status_code == 401
    assert_limited(await attempt(from_address(6), ada, PASSWORD))
    assert (await attempt(from_address(7), ada, PASSWORD)).status_code == 200
