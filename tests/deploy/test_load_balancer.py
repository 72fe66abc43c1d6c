"""deploy/haproxy.cfg for real, outside Docker: HAProxy with that file (its listening ports and
server addresses pointed at this machine) in front of three real control-plane copies on one
PostgreSQL database, one Redis and one data folder, as compose.yaml runs two. The third copy
waits for a worker (`ready_workers=1`), so its /readyz says 503: the load balancer must send
it nothing. Through the load balancer: plain requests reach both ready copies (no
stickiness), a sign-in on one is honoured by the other, workers connect over WebSockets and
spread over the copies, a client WebSocket follows a task to its end, and every copy serves
the task's zip from the shared store. /metrics is refused to the public, and no access token
reaches HAProxy's log. compose.yaml's health check commands of `lb` and the copies pass against
them (and fail against the copy that is not ready)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import sys
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from websockets.asyncio.client import connect

from shoal import admin
from shoal.api.server import RunningServer, running_server
from shoal.config import Settings
from shoal.tools.echo import EchoTool
from shoal.worker.agent import Worker
from tests.conftest import (
    POSTGRES_URL,
    REDIS_URL,
    drop_postgres,
    fresh_postgres,
    make_settings,
    require_service,
)
from tests.deploy.stack import ROOT, haproxy, local_config, require_binary, states
from tests.runtime.harness import DEADLINE, wait_until

pytestmark = [pytest.mark.postgres, pytest.mark.redis]
NAMES = ("shoal-1", "shoal-2", "shoal-3")  # the third is never ready


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def healthcheck(service: str, port: str, local_port: str) -> int:
    """Run compose.yaml's health check of `service` (a `CMD` list) with `port` replaced by
    `local_port`; its exit status."""
    spec = yaml.safe_load((ROOT / "compose.yaml").read_text())["services"][service]
    kind, *command = spec["healthcheck"]["test"]
    assert kind == "CMD"
    command = [part.replace(f"127.0.0.1:{port}", f"127.0.0.1:{local_port}")
               .replace(f"127.0.0.1/{port}", f"127.0.0.1/{local_port}") for part in command]
    assert command != spec["healthcheck"]["test"][1:], "the port was found"
    if command[0] == "python":
        command[0] = sys.executable
    proc = await asyncio.create_subprocess_exec(*command, stdout=asyncio.subprocess.DEVNULL,
                                                stderr=asyncio.subprocess.DEVNULL)
    return await asyncio.wait_for(proc.wait(), timeout=30)


async def served(srv: RunningServer, route: str) -> int:
    """How many requests for `route` (a template) this copy answered, from its /metrics."""
    async with httpx.AsyncClient() as direct:
        text = (await direct.get(f"{srv.url}/metrics")).text
    return int(sum(s.value for family in text_string_to_metric_families(text)
                   for s in family.samples
                   if s.name == "shoal_http_request_duration_seconds_count"
                   and s.labels.get("route") == route))


def fresh() -> httpx.AsyncClient:
    """A client that opens a new connection per request, so each is balanced on its own."""
    return httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_keepalive_connections=0))


async def test_haproxy_spreads_http_and_websockets_over_ready_copies(tmp_path: Path) -> None:
    """The stack's load balancer, as configured, in front of real copies (module docstring)."""
    require_service(POSTGRES_URL, "PostgreSQL", "SHOAL_TEST_POSTGRES_URL")
    require_service(REDIS_URL, "Redis", "SHOAL_TEST_REDIS_URL")
    require_binary("haproxy", "haproxy")
    url = await fresh_postgres(POSTGRES_URL)
    shared = tmp_path / "data"  # one data folder, as compose's shoal-data volume

    def copy(name: str) -> Settings:
        return make_settings(tmp_path, database_url=url, redis_url=REDIS_URL, data_dir=shared,
                             instance_id=name, ready_workers=1 if name == "shoal-3" else 0)

    public, internal = free_port(), free_port()
    lb, stats = f"http://127.0.0.1:{public}", f"http://127.0.0.1:{internal}"
    workers: list[Worker] = []
    runners: list[asyncio.Task[None]] = []
    try:
        async with contextlib.AsyncExitStack() as stack:
            copies = {name: await stack.enter_async_context(running_server(copy(name)))
                      for name in NAMES}
            config = tmp_path / "haproxy.cfg"
            config.write_text(local_config({n: c.url for n, c in copies.items()}, public, internal))
            log = tmp_path / "haproxy.log"
            proc = await stack.enter_async_context(haproxy(config, log))
            client = await stack.enter_async_context(fresh())

            async def settled() -> bool:
                assert proc.returncode is None, f"HAProxy stopped: {log.read_text()}"
                seen = await states(client, stats, NAMES)
                return (seen.get("shoal-1") == "UP" and seen.get("shoal-2") == "UP"
                        and seen.get("shoal-3") == "DOWN")

            await wait_until(
                settled, what="HAProxy to see shoal-1 and shoal-2 up and shoal-3 (not ready) down")
            assert (await client.get(f"{stats}/healthz")).status_code == 200
            # compose.yaml's own health checks, run as Docker would (with this test's ports).
            assert await healthcheck("lb", "8404", str(internal)) == 0
            server = urlsplit(copies["shoal-1"].url).port
            assert await healthcheck("shoal-1", "8000", str(server)) == 0
            never = urlsplit(copies["shoal-3"].url).port
            assert await healthcheck("shoal-2", "8000", str(never)) != 0, "/readyz says 503"

            # Plain HTTP: every request answered, both ready copies used, the third never.
            for _ in range(12):
                assert (await client.get(f"{lb}/healthz")).status_code == 200
            counts = {name: await served(srv, "/healthz") for name, srv in copies.items()}
            assert counts["shoal-1"] > 0, counts
            assert counts["shoal-2"] > 0, counts
            assert counts["shoal-3"] == 0, counts
            assert (await client.get(f"{lb}/metrics")).status_code == 404

            # A sign-in made through one copy is honoured by the others (one secret key).
            await admin.create_user(copies["shoal-1"].services.db, copy("shoal-1"),
                                    username="alice", password="password123")
            signed = await client.post(f"{lb}/api/v1/auth/login",
                                       json={"username": "alice", "password": "password123"})
            assert signed.status_code == 200, signed.text
            access = signed.json()["access_token"]
            client.headers["Authorization"] = f"Bearer {access}"
            for _ in range(6):
                assert (await client.get(f"{lb}/api/v1/tasks")).status_code == 200
            assert all([await served(copies[n], "/api/v1/tasks") for n in NAMES[:2]])

            # Workers dial the load balancer over WebSockets: one lands on each ready copy.
            for i in (1, 2):
                token = await admin.create_worker_token(copies["shoal-1"].services.db,
                                                        name=f"w{i}")
                worker = Worker(lb, token, copy("shoal-1").model_copy(
                    update={"data_dir": tmp_path / f"w{i}"}), tools={"echo": EchoTool()},
                    name=f"w{i}", slots=2, shutdown_grace=0)
                workers.append(worker)
                runners.append(asyncio.create_task(worker.run(), name=f"worker-w{i}"))
                await wait_until(lambda i=i: sum(len(s.services.runtime.fleet)
                                                 for s in copies.values()) == i,
                                 what=f"worker w{i} to connect through HAProxy")
            fleets = {n: len(s.services.runtime.fleet) for n, s in copies.items()}
            assert fleets == {"shoal-1": 1, "shoal-2": 1, "shoal-3": 0}

            # A client WebSocket through the load balancer follows a task to its end.
            created = await client.post(f"{lb}/api/v1/tasks", json={
                "description": "Through the load balancer", "plan": [
                    {"name": "a", "description": "a", "tool": "echo",
                     "options": {"files": {"a.txt": "from a worker behind HAProxy\n"}}},
                    {"name": "b", "description": "b", "tool": "echo", "dependencies": ["a"]}]})
            assert created.status_code == 201, created.text
            task_id = created.json()["task_id"]
            seen = await _follow(f"ws://127.0.0.1:{public}/ws?token={access}", task_id)
            assert seen[-1]["type"] == "task_complete"
            assert [e["seq"] for e in seen] == sorted({e["seq"] for e in seen}), "in order"

            # The task's zip, from the shared store, through whichever copy answers.
            zips = []
            for _ in range(4):
                got = await client.get(f"{lb}/api/v1/tasks/{task_id}/download")
                assert got.status_code == 200, got.text
                zips.append(got.content)
            assert len(set(zips)) == 1
            route = "/api/v1/tasks/{task_id}/download"
            assert all([await served(copies[n], route) for n in NAMES[:2]])

            # The copies share their workers (ADR 0039): once each sees the other's worker, a
            # fan-out wider than one worker's slots runs on both, whichever copy drives it.
            await wait_until(lambda: all(len(copies[n].services.runtime.fleet.connections())
                                         == 2 for n in NAMES[:2]),
                             what="each ready copy to see both workers")
            fan = await client.post(f"{lb}/api/v1/tasks", json={
                "description": "Wider than one worker", "plan": [
                    {"name": f"s{i}", "description": f"s{i}", "tool": "echo",
                     "options": {"delay": 0.5}} for i in range(4)]})
            assert fan.status_code == 201, fan.text
            fan_id = fan.json()["task_id"]
            await _follow(f"ws://127.0.0.1:{public}/ws?token={access}", fan_id)
            spans = (await client.get(f"{lb}/api/v1/tasks/{fan_id}/attempts")).json()
            assert [a["status"] for a in spans["attempts"]] == ["succeeded"] * 4
            assert len({a["worker_id"] for a in spans["attempts"]}) == 2, spans

            # Events of a task one copy drives reach a client of the other copy, in order and
            # whole; moved to a third copy, the client resumes with `since`: no gap, no repeat.
            chain = await client.post(f"{copies['shoal-1'].url}/api/v1/tasks", json={
                "description": "Followed across copies", "plan": [
                    {"name": f"c{i}", "description": f"c{i}", "tool": "echo",
                     "options": {"delay": 0.2}, "dependencies": [f"c{i - 1}"] if i else []}
                    for i in range(6)]})
            assert chain.status_code == 201, chain.text
            chain_id = chain.json()["task_id"]
            assert uuid.UUID(chain_id) in copies["shoal-1"].services.runtime.memory.states
            on_2 = copies["shoal-2"].url.replace("http://", "ws://") + f"/ws?token={access}"
            on_3 = copies["shoal-3"].url.replace("http://", "ws://") + f"/ws?token={access}"
            first = await _follow(on_2, chain_id, until="subtask_update", count=4)
            assert first[-1]["type"] != "task_complete", "moved while the task still runs"
            rest = await _follow(on_3, chain_id, since=first[-1]["seq"])
            whole = await _follow(on_2, chain_id)  # replayed from the store afterwards
            assert [e["seq"] for e in first + rest] == [e["seq"] for e in whole]
            assert rest[-1]["type"] == "task_complete"
            for worker in workers:
                worker.stop(grace=0)
            await asyncio.gather(*runners)
        logged = log.read_text()
        assert "GET /ws/worker HTTP/1.1" in logged
        assert "GET /ws HTTP/1.1" in logged
        assert access not in logged, "the load balancer's log holds no access token"
    finally:
        for worker, runner in zip(workers, runners, strict=True):
            if not runner.done():
                worker.stop(grace=0)
                await runner
        await drop_postgres(url, POSTGRES_URL)


async def _follow(ws_url: str, task_id: str, *, since: int = 0, until: str = "task_complete",
                  count: int = 1) -> list[dict[str, Any]]:
    """The task's events after `since` until the `count`-th event of type `until` (or the
    task's `task_complete`), in the order they arrived."""
    events: list[dict[str, Any]] = []
    async with asyncio.timeout(DEADLINE), connect(ws_url) as ws:
        await ws.send(json.dumps({"type": "subscribe", "task_id": task_id, "since": since}))
        while not events or (events[-1]["type"] != "task_complete" and sum(
                e["type"] == until for e in events) < count):
            frame = json.loads(await ws.recv())
            items = frame["items"] if frame["type"] == "batch" else [frame]
            events += [i for i in items if "seq" in i and i["data"].get("task_id") == task_id]
    return events
