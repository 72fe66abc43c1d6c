"""The client's address behind deploy/haproxy.cfg, for real: a copy limits sign-ins per client
address, and behind the load balancer that address comes from X-Forwarded-For. HAProxy runs
the shipped file (ports and server pointed at this machine, its header rules as they are) in
front of a real copy on Redis's shared limiter; the client connects from 127.0.0.5 and sends
invented X-Forwarded-For, Forwarded and X-Real-IP headers. However many addresses it invents,
it gets one allowance, counted under the address the balancer saw; and a copy believes the
header only from the proxies it trusts (SHOAL_TRUSTED_PROXIES)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from redis import asyncio as aioredis

from shoal.api.server import RunningServer, running_server
from shoal.bus import keys
from shoal.config import Settings
from tests.conftest import REDIS_URL, make_settings, require_service
from tests.deploy.stack import haproxy, local_config, require_binary, states
from tests.e2e.procs import free_port
from tests.runtime.harness import wait_until

pytestmark = pytest.mark.redis
CLIENT = "127.0.0.5"  # the client's own address, as the balancer sees it
LIMIT = 3  # sign-in attempts per address per minute
HEADER_RULES = ("http-request del-header Forwarded", "http-request del-header X-Real-IP",
                "http-request set-header X-Forwarded-For %[src]")


def copy_settings(tmp_path: Path, trusted: str) -> Settings:
    return make_settings(tmp_path, redis_url=REDIS_URL, trusted_proxies=trusted,
                         login_rate_limit_per_minute=LIMIT)


def client_from(address: str, base_url: str) -> httpx.AsyncClient:
    """A client whose connections leave from `address`, one connection per request."""
    return httpx.AsyncClient(
        base_url=base_url, timeout=30,
        transport=httpx.AsyncHTTPTransport(local_address=address),
        limits=httpx.Limits(max_keepalive_connections=0))


@contextlib.asynccontextmanager
async def behind_haproxy(tmp_path: Path, settings: Settings) -> AsyncIterator[
        tuple[str, RunningServer]]:
    """A copy on `settings`, and the shipped HAProxy config in front of it: (its URL, copy)."""
    require_service(REDIS_URL, "Redis", "SHOAL_TEST_REDIS_URL")
    require_binary("haproxy", "haproxy")
    public, internal = free_port(), free_port()
    async with running_server(settings) as srv:
        config = tmp_path / "haproxy.cfg"
        config.write_text(local_config({"shoal-1": srv.url}, public, internal))
        lines = [line.strip() for line in config.read_text().splitlines()]
        assert all(rule in lines for rule in HEADER_RULES), "the shipped header rules"
        assert "option forwardfor" not in lines
        log = tmp_path / "haproxy.log"
        async with haproxy(config, log) as proc, httpx.AsyncClient() as probe:
            async def up() -> bool:
                assert proc.returncode is None, f"HAProxy stopped: {log.read_text()}"
                seen = await states(probe, f"http://127.0.0.1:{internal}", ["shoal-1"])
                return seen.get("shoal-1") == "UP"

            await wait_until(up, what="HAProxy to see the copy up")
            yield f"http://127.0.0.1:{public}", srv


async def sign_in(client: httpx.AsyncClient, forged: str) -> httpx.Response:
    """A wrong password, sent with invented addresses in every header that could carry one."""
    return await client.post(
        "/api/v1/auth/login", json={"username": "alice", "password": "wrong-password"},
        headers={"X-Forwarded-For": forged, "Forwarded": f"for={forged}", "X-Real-IP": forged})


async def counted(settings: Settings) -> set[str]:
    """The addresses the copies' shared limiter counts sign-ins under."""
    redis = aioredis.Redis.from_url(REDIS_URL)
    try:
        prefix = keys.rate_limit_key("login:", settings.redis_namespace)
        return {key.decode().removeprefix(prefix)
                async for key in redis.scan_iter(match=f"{prefix}*")}
    finally:
        await redis.aclose()


async def test_invented_addresses_get_no_fresh_sign_in_allowance(tmp_path: Path) -> None:
    """Even a copy that believed every loopback proxy (so only the balancer's rewriting stands
    between the client's header and the limit) counts each attempt under the client's real
    address: past the limit, a new invented address is refused all the same."""
    settings = copy_settings(tmp_path, "127.0.0.0/8")
    async with behind_haproxy(tmp_path, settings) as (lb, _), client_from(CLIENT, lb) as client:
        for i in range(LIMIT):
            assert (await sign_in(client, f"203.0.113.{i + 1}")).status_code == 401
        refused = await sign_in(client, "203.0.113.99")
        assert refused.status_code == 429, refused.text
        assert int(refused.headers["Retry-After"]) > 0
        assert await counted(settings) == {CLIENT}


@pytest.mark.parametrize(("trusted", "via_balancer"), [("127.0.0.1", CLIENT), ("", "127.0.0.1")])
async def test_a_copy_believes_the_header_only_from_its_trusted_proxies(
        tmp_path: Path, trusted: str, via_balancer: str) -> None:
    """A copy trusting the balancer's address (127.0.0.1 here, as compose.yaml trusts the `lb`
    service's) counts a sign-in through it under the client's address; trusting none, under
    the balancer's. A sign-in sent straight to the copy with an invented header counts under
    the sender's address."""
    settings = copy_settings(tmp_path, trusted)
    async with behind_haproxy(tmp_path, settings) as (lb, srv):
        async with client_from(CLIENT, lb) as client:
            assert (await sign_in(client, "203.0.113.1")).status_code == 401
        async with client_from("127.0.0.6", srv.url) as direct:
            assert (await sign_in(direct, "203.0.113.2")).status_code == 401
        assert await counted(settings) == {via_balancer, "127.0.0.6"}
