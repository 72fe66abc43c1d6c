"""Kill -9 the control plane mid-task: it resumes from the store, and no step or event is lost."""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from tests.e2e.procs import (
    access_token,
    cluster,
    free_port,
    signed_in,
    sse_events,
    submit,
    wait_healthy,
    wait_task,
    wait_workers_online,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]

STEPS = 6
CHAIN = [
    {
        "name": f"step{i}",
        "description": f"Step {i} of the chain.",
        "tool": "echo",
        "options": {"delay": 0.5},
        "dependencies": [i - 1] if i else [],
    }
    for i in range(STEPS)
]


async def _record(ws: ClientConnection, into: list[dict[str, Any]]) -> None:
    """Append every event the socket delivers until the connection drops."""
    with contextlib.suppress(ConnectionClosed):
        async for raw in ws:
            message = json.loads(raw)
            if "seq" in message:
                into.append(message)


async def _events_until_complete(
    ws_url: str, task_id: str, *, within: float = 20
) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    async with asyncio.timeout(within), connect(ws_url) as ws:
        async for raw in ws:
            message = json.loads(raw)
            if "seq" not in message:
                continue
            events.append(message)
            if message["type"] == "task_complete" and message["data"].get("task_id") == task_id:
                return events
    raise AssertionError("the WebSocket closed before task_complete")


def _completed(detail: dict[str, Any]) -> dict[str, str]:
    return {
        s["subtask_id"]: s["completed_at"] for s in detail["subtasks"] if s["status"] == "completed"
    }


async def test_control_plane_killed_mid_task_resumes_without_rerun_or_lost_event(
    database_url: str,
    tmp_path: Path,
) -> None:
    """The task survives kill -9 of the server; done steps keep their one run; replay is whole."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    async with cluster(tmp_path, database_url) as stack:
        await stack.create_user("alice")
        server = stack.start_server(port)
        token = await stack.create_worker_token("w1")
        await wait_healthy(url, server)
        worker = stack.start_worker("w1", token, url, slots=1)
        async with signed_in(url, "alice") as client:
            await wait_workers_online(client, {"w1"}, [server, worker])
            ws_url = f"{url.replace('http', 'ws')}/ws?token={await access_token(client, 'alice')}"
            seen: list[dict[str, Any]] = []
            async with connect(ws_url + "&since=0") as ws, asyncio.TaskGroup() as tg:
                tg.create_task(_record(ws, seen))  # ends when the server dies
                task_id = await submit(
                    client, {"description": "A chain that survives", "plan": CHAIN}
                )
                before = await wait_task(
                    client,
                    task_id,
                    within=20,
                    what="two steps completed",
                    procs=[server, worker],
                    until=lambda d: len(_completed(d)) >= 2,
                )
                await server.kill()
            last_seen = max(e["seq"] for e in seen)
            assert len(_completed(before)) < STEPS, "the crash came too late to test anything"

            restarted = stack.start_server(port, name="server-restarted")
            await wait_healthy(url, restarted)
            detail = await wait_task(
                client,
                task_id,
                within=45,
                what="the task to finish",
                procs=[restarted, worker],
                until=lambda d: d["status"] in ("completed", "failed"),
            )
            assert detail["status"] == "completed", detail

            completed = _completed(detail)
            assert len(completed) == STEPS
            for sid, completed_at in _completed(before).items():
                assert completed[sid] == completed_at
            for sid in completed:
                sub = (await client.get(f"/api/v1/subtasks/{sid}")).json()
                statuses = [h["status"] for h in sub["attempt_history"]]
                assert statuses.count("succeeded") == 1, sub["attempt_history"]

            replayed = await _events_until_complete(f"{ws_url}&since={last_seen}", task_id)
            seqs = [e["seq"] for e in replayed]
            assert seqs == sorted(set(seqs)), "events must come once each, in order"
            assert seqs[0] > last_seen
            sse = await sse_events(client, task_id, until={"task_complete"}, last_event_id=0)
            ws_task_seqs = {e["seq"] for e in replayed if e["data"].get("task_id") == task_id}
            sse_task_seqs = {e["seq"] for e in sse if e["seq"] > last_seen}
            assert ws_task_seqs == sse_task_seqs
            assert replayed[-1]["type"] == "task_complete"
            assert sse[-1]["type"] == "task_complete"
