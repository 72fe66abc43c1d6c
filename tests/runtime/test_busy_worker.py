"""A worker connected here that says, by heartbeat, it still runs an attempt this copy no longer
counts (one whose lease ran out here, or one cancelled that is still ending) has no free slot for
it. Before, every heartbeat cleared the mark a decline left, so the copy placed work on the full
worker again at each heartbeat, and it declined again: a loop of hundreds of declines while the
attempt ran on (`tests/api/test_supervisor_tools.py` timed out so once, under load)."""

from __future__ import annotations

import json
import uuid
from typing import Any

from websockets.asyncio.client import ClientConnection, connect

from shoal import admin
from shoal.api.server import running_server
from shoal.config import Settings
from shoal.runtime.fleet import Connection
from tests.e2e.procs import receive_until
from tests.runtime.harness import login, submit, wait_until


def test_an_attempt_this_copy_does_not_count_fills_a_slot_until_a_heartbeat_drops_it() -> None:
    """Heard running an unknown attempt, a one-slot worker is not free; heard free, it is."""
    async def send(text: str) -> None: ...
    async def close(code: int, reason: str) -> None: ...
    conn = Connection(worker_id=uuid.uuid4(), machine_id="m", name="w", tools={}, slots=2,
                      send=send, close=close)
    ours, theirs = uuid.uuid4(), uuid.uuid4()
    conn.running.add(ours)
    assert conn.heard([ours, theirs]) == [ours]
    assert not conn.free()
    assert conn.heard([ours]) == [ours]
    assert conn.free()
    conn.declined()  # a decline's mark lasts until the next heartbeat says otherwise
    assert not conn.free()
    assert conn.heard([]) == []
    assert conn.free()


async def test_no_work_goes_to_a_worker_whose_heartbeat_says_it_is_full(
    settings: Settings,
) -> None:
    """A one-slot worker heartbeating an attempt of its own gets no attempt of a new task; once
    a heartbeat says it is free, the next task's attempt is the first it gets."""
    async with running_server(settings) as srv:
        token = await admin.create_worker_token(srv.services.db, name="busy")
        url = srv.url.replace("http://", "ws://") + "/ws/worker"
        async with connect(url, additional_headers={"Authorization": f"Bearer {token}"}) as ws:
            await ws.send(json.dumps({
                "v": 1, "type": "worker_register", "machine_id": f"busy-{uuid.uuid4()}",
                "machine_name": "busy", "slots": 1, "tools": [{"name": "echo", "local": True}]}))
            registered = await receive_until(ws, lambda m: m["type"] == "registered")
            client = await login(srv, settings)
            worker = registered["worker_id"]
            await _beat(ws, client, worker, running=[str(uuid.uuid4())], cpu=41.5)
            first = await submit(client, [{"name": "a", "description": "Say a", "tool": "echo"}])
            await _beat(ws, client, worker, running=[str(uuid.uuid4())], cpu=42.5)
            resp = await client.post(f"/api/v1/tasks/{first}/cancel")
            assert resp.status_code in (200, 202), resp.text
            await _beat(ws, client, worker, running=[], cpu=43.5)
            second = await submit(client, [{"name": "b", "description": "Say b", "tool": "echo"}])
            sent = await receive_until(ws, lambda m: m["type"] == "execute_task")
            await client.aclose()
    assert sent["task_id"] == second  # nothing of the first task came while it was full


async def _beat(ws: ClientConnection, client: Any, worker: str, *, running: list[str],
                cpu: float) -> None:
    """Send a heartbeat and wait until the control plane has recorded it (its CPU reading)."""
    await ws.send(json.dumps({"v": 1, "type": "heartbeat", "cpu_percent": cpu,
                              "memory_percent": 1.0, "disk_percent": 1.0, "running": running}))

    async def recorded() -> bool:
        detail = (await client.get(f"/api/v1/workers/{worker}")).json()
        return any(s["cpu_percent"] == cpu for s in detail.get("recent", []))

    await wait_until(recorded, what=f"the heartbeat with cpu {cpu} to be recorded")
