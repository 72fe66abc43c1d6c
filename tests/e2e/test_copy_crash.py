"""Kill -9 of one control-plane copy of three, behind HAProxy, with 30-subtask graphs in flight.

Three `shoal serve` processes share PostgreSQL, Redis and a data folder behind the stack's own
HAProxy configuration; three workers dial the load balancer. Each copy drives one task (each
submitted to it directly); a client follows the first copy's task on that copy. Then the first
copy is killed: its workers reconnect through the load balancer to the others, its task is
taken over once its claim expires, the client resumes through the load balancer with `since`,
and every task completes — no subtask lost, none completed twice, no event missed or repeated.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from shoal.store.claims import claim_of
from shoal.store.db import Database
from tests.conftest import POSTGRES_URL, REDIS_URL, drop_postgres, fresh_postgres, require_service
from tests.deploy.stack import haproxy, local_config, require_binary, states
from tests.e2e.procs import PASSWORD, cluster, finished, free_port, wait_for, wait_healthy

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.redis, pytest.mark.timeout(150)]
COPIES = ("copy-1", "copy-2", "copy-3")
CLAIM_TTL = 3.0
CLAIM_INTERVAL = 0.5
LAYERS, WIDTH = 5, 6  # 30 subtasks, each after two of the layer before
FINISHED = re.compile(r"worker\.attempt_finished +attempt_id=([0-9a-f-]{36}) .*status=succeeded")


def graph() -> list[dict[str, Any]]:
    return [{"name": f"s{layer}_{i}", "description": f"Step {i} of layer {layer}.",
             "tool": "echo", "options": {"delay": 0.3},
             "dependencies": [f"s{layer - 1}_{i}", f"s{layer - 1}_{(i + 1) % WIDTH}"]
             if layer else []}
            for layer in range(LAYERS) for i in range(WIDTH)]


async def follow(ws_url: str, task_id: str, since: int, into: list[dict[str, Any]]) -> None:
    """Append the task's events after `since` until its end or until the connection drops."""
    with contextlib.suppress(ConnectionClosed, OSError):
        async with connect(ws_url, open_timeout=10) as ws:
            await ws.send(json.dumps({"type": "subscribe", "task_id": task_id, "since": since}))
            async for raw in ws:
                frame = json.loads(raw)
                for item in frame["items"] if frame["type"] == "batch" else [frame]:
                    if "seq" in item and item["data"].get("task_id") == task_id:
                        into.append(item)
                        if item["type"] in ("task_complete", "task_failed"):
                            return


async def connected_workers(url: str) -> int:
    """Workers connected to the copy at `url`, by its /metrics."""
    async with httpx.AsyncClient(timeout=5) as direct:
        text = (await direct.get(f"{url}/metrics")).text
    return int(sum(s.value for family in text_string_to_metric_families(text)
                   for s in family.samples if s.name == "shoal_workers"))


async def test_a_copy_killed_mid_run_loses_nothing(tmp_path: Path) -> None:
    require_service(POSTGRES_URL, "PostgreSQL", "SHOAL_TEST_POSTGRES_URL")
    require_service(REDIS_URL, "Redis", "SHOAL_TEST_REDIS_URL")
    require_binary("haproxy", "haproxy")
    database = await fresh_postgres(POSTGRES_URL)
    try:
        async with cluster(tmp_path, database) as c:
            await c.create_user("alice")
            ports = {name: free_port() for name in COPIES}
            urls = {name: f"http://127.0.0.1:{port}" for name, port in ports.items()}
            namespace = f"shoal-e2e-{uuid.uuid4().hex[:8]}"  # one for the three: they share
            procs = {name: c.start(name, ["serve", "--port", str(ports[name])], {
                **c.server_env(), "SHOAL_INSTANCE_ID": name, "SHOAL_REDIS_URL": REDIS_URL,
                "SHOAL_REDIS_NAMESPACE": namespace,
                "SHOAL_CLAIM_TTL": str(CLAIM_TTL), "SHOAL_CLAIM_INTERVAL": str(CLAIM_INTERVAL)},
                tmp_path / "server") for name in COPIES}
            for name in COPIES:
                await wait_healthy(urls[name], procs[name])
            public, internal = free_port(), free_port()
            config = tmp_path / "haproxy.cfg"
            config.write_text(local_config(urls, public, internal))
            lb = f"http://127.0.0.1:{public}"
            async with haproxy(config, tmp_path / "haproxy.log"), \
                    httpx.AsyncClient(timeout=15) as client:

                async def all_up() -> bool:
                    return set((await states(client, f"http://127.0.0.1:{internal}",
                                             COPIES)).values()) == {"UP"}

                await wait_for(all_up, within=30, what="HAProxy to see the three copies up",
                               procs=c.procs)
                for i in range(3):
                    token = await c.create_worker_token(f"w{i}")
                    c.start_worker(f"w{i}", token, lb, slots=2)
                signed = await client.post(f"{lb}/api/v1/auth/login",
                                           json={"username": "alice", "password": PASSWORD})
                assert signed.status_code == 200, signed.text
                token = signed.json()["access_token"]
                client.headers["Authorization"] = f"Bearer {token}"

                async def three_connected() -> bool:
                    return sum([await connected_workers(u) for u in urls.values()]) == 3

                await wait_for(three_connected, within=30, what="three workers connected",
                               procs=c.procs)
                tasks = {}
                for name in COPIES:  # each copy drives the task submitted to it
                    created = await client.post(f"{urls[name]}/api/v1/tasks", json={
                        "description": f"Graph on {name}", "plan": graph()})
                    assert created.status_code == 201, created.text
                    tasks[name] = created.json()["task_id"]
                victim = tasks["copy-1"]
                seen: list[dict[str, Any]] = []
                watcher = asyncio.create_task(follow(
                    f"ws://127.0.0.1:{ports['copy-1']}/ws?token={token}", victim, 0, seen))

                async def some_done() -> bool:
                    detail = (await client.get(f"{urls['copy-2']}/api/v1/tasks/{victim}")).json()
                    return sum(s["status"] == "completed" for s in detail["subtasks"]) >= 8

                await wait_for(some_done, within=40, what="a third of the task done",
                               procs=c.procs)
                await procs["copy-1"].kill()
                killed = time.monotonic()
                alive = [p for p in c.procs if p is not procs["copy-1"]]
                await asyncio.wait_for(watcher, 10)  # its socket dropped with the copy
                assert seen, "the client saw the task's first events on copy-1"
                assert seen[-1]["type"] != "task_complete"

                db = Database.connect(database)
                try:
                    async def taken_over() -> str | None:
                        async with db.connection() as conn:
                            claim = await conn.run_sync(claim_of, uuid.UUID(victim))
                        owner = claim.owner if claim is not None else None
                        return owner if owner not in (None, "copy-1") else None

                    new_owner = await wait_for(taken_over, within=30,
                                               what="the task taken over", procs=alive)
                    took = time.monotonic() - killed
                finally:
                    await db.dispose()
                assert new_owner in ("copy-2", "copy-3")
                print(f"taken over by {new_owner} {took:.1f} s after the kill")
                assert took <= CLAIM_TTL + CLAIM_INTERVAL + 5.0  # the TTL, with room for load

                # the client comes back through the load balancer, from where it was
                rest: list[dict[str, Any]] = []
                await asyncio.wait_for(
                    follow(f"ws://127.0.0.1:{public}/ws?token={token}", victim,
                           seen[-1]["seq"], rest), 60)
                subtask_of: dict[str, str] = {}
                for name, task_id in tasks.items():

                    async def ended(task_id: str = task_id) -> dict[str, Any] | None:
                        detail = (await client.get(f"{lb}/api/v1/tasks/{task_id}")).json()
                        return detail if finished(detail) else None

                    detail = await wait_for(ended, within=60, what=f"{name}'s task to end",
                                            procs=alive)
                    assert detail["status"] == "completed", (name, detail["status"])
                    spans = (await client.get(f"{lb}/api/v1/tasks/{task_id}/attempts")).json()
                    done: dict[str, int] = {}
                    for span in spans["attempts"]:
                        if span["status"] == "succeeded":
                            done[span["subtask_id"]] = done.get(span["subtask_id"], 0) + 1
                    assert len(done) == LAYERS * WIDTH, "no subtask lost"
                    assert set(done.values()) == {1}, "no subtask completed twice"
                    subtask_of |= {span["attempt_id"]: span["subtask_id"]
                                   for span in spans["attempts"]}
                # what a live worker finished is not run again: each subtask ran to success
                # on a worker once (results sent to the dead copy are asked for again)
                ran = [subtask_of[aid] for p in c.procs if p.name.startswith("worker-")
                       for aid in FINISHED.findall(p.output()) if aid in subtask_of]
                assert len(ran) == len(set(ran)) == 3 * LAYERS * WIDTH, "a step ran twice"

                async def moved() -> bool:  # copy-1's workers now on the others
                    return sum([await connected_workers(urls[n]) for n in COPIES[1:]]) == 3

                await wait_for(moved, within=30, what="every worker on copy-2 or copy-3",
                               procs=alive)
                whole: list[dict[str, Any]] = []
                await follow(f"ws://127.0.0.1:{public}/ws?token={token}", victim, 0, whole)
                assert [e["seq"] for e in seen + rest] == [e["seq"] for e in whole], \
                    "every event once, in order, across the kill"
    finally:
        await drop_postgres(database, POSTGRES_URL)

