"""A worker killed mid-attempt loses its lease; the subtask finishes elsewhere, exactly once."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from tests.e2e.procs import (
    Cluster,
    Proc,
    free_port,
    receive_until,
    signed_in,
    submit,
    wait_for,
    wait_healthy,
    wait_task,
    wait_workers_online,
    worker_socket,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]

PLAN = [
    {"name": "long", "description": "Take a while.", "tool": "echo", "options": {"delay": 5}},
    {"name": "quick", "description": "Follow up.", "tool": "echo", "dependencies": ["long"]},
]


def _by_name(detail: dict[str, Any], name: str) -> dict[str, Any]:
    return next(s for s in detail["subtasks"] if s["name"] == name)


async def _subtask(client: httpx.AsyncClient, subtask_id: str) -> dict[str, Any]:
    resp = await client.get(f"/api/v1/subtasks/{subtask_id}")
    assert resp.status_code == 200, resp.text
    detail: dict[str, Any] = resp.json()
    return detail


async def _start(stack: Cluster) -> tuple[str, dict[str, str], dict[str, Proc], Proc]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    await stack.create_user("alice")
    server = stack.start_server(port)
    names = ("wa", "wb")
    tokens = dict(
        zip(names, await asyncio.gather(*map(stack.create_worker_token, names)), strict=True)
    )
    await wait_healthy(url, server)
    workers = {n: stack.start_worker(n, tokens[n], url, slots=1) for n in names}
    return url, tokens, workers, server


async def test_killed_worker_attempt_is_retried_elsewhere_and_late_result_fenced(
    stack: Cluster,
) -> None:
    """Kill -9 the worker running a subtask: it reruns on the other; A's stale result is refused."""
    url, tokens, workers, server = await _start(stack)
    procs = [server, *workers.values()]
    async with signed_in(url, "alice") as client:
        ids = await wait_workers_online(client, set(workers), procs)
        task_id = await submit(client, {"description": "Survive a worker crash", "plan": PLAN})
        detail = (await client.get(f"/api/v1/tasks/{task_id}")).json()
        long_id = _by_name(detail, "long")["subtask_id"]

        async def running_attempt() -> dict[str, Any] | None:
            history = (await _subtask(client, long_id))["attempt_history"]
            return next((h for h in history if h["status"] == "running"), None)

        attempt = await wait_for(
            running_attempt, within=20, what="the long subtask running", procs=procs
        )
        a = next(name for name, wid in ids.items() if wid == attempt["worker_id"])
        b = next(n for n in workers if n != a)
        await workers[a].kill()

        detail = await wait_task(
            client,
            task_id,
            within=30,
            what="the task to finish",
            procs=[server, workers[b]],
            until=lambda d: d["status"] in ("completed", "failed"),
        )
        assert detail["status"] == "completed", detail
        quick = _by_name(detail, "quick")
        assert (quick["assigned_worker"], quick["attempts"]) == (b, 1)
        sub = await _subtask(client, long_id)
        history = sorted(sub["attempt_history"], key=lambda h: h["fence"])
        assert [(h["fence"], h["status"], h["worker_id"]) for h in history] == [
            (1, "expired", ids[a]),
            (2, "succeeded", ids[b]),
        ]
        output = sub["output"]

        # Worker A comes back (same token, same machine id) with its expired attempt's result.
        machine_id = (workers[a].data_dir / "worker" / a / "machine_id").read_text().strip()
        async with worker_socket(url, tokens[a]) as ws:
            await ws.send(
                _message(
                    "worker_register",
                    machine_id=machine_id,
                    machine_name=a,
                    tools=[{"name": "echo", "version": "1", "local": True}],
                )
            )
            await receive_until(ws, lambda m: m["type"] == "registered")
            await ws.send(
                _message(
                    "task_result",
                    attempt_id=history[0]["attempt_id"],
                    fence=1,
                    status="succeeded",
                    output="a late, stale answer",
                )
            )
            ack = await receive_until(ws, lambda m: m["type"] == "ack")
        assert ack["attempt_id"] == history[0]["attempt_id"]
        assert ack["accepted"] is False
        assert ack["reason"]

        after = await _subtask(client, long_id)
        assert [h["status"] for h in after["attempt_history"]].count("succeeded") == 1
        assert after["output"] == output
        assert after["status"] == "completed"


def _message(kind: str, **fields: Any) -> str:
    return json.dumps({"type": kind, "v": 1, **fields})
