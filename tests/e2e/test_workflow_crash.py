"""Kill -9 in the middle of a route or a loop of a document workflow: nothing is lost, no step
completes twice, and the route's decisions are not made again."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import httpx
import pytest

from tests.e2e.procs import (
    Cluster,
    Proc,
    free_port,
    signed_in,
    sse_events,
    submit,
    wait_for,
    wait_healthy,
    wait_port,
    wait_task,
    wait_workers_online,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(150)]

SLOW = "[demo:slow=0.4]"  # every answer of the demo model takes 0.4 s: time to kill mid-way


async def _start(stack: Cluster, names: tuple[str, ...]) -> tuple[str, Proc, dict[str, Proc]]:
    port, model_port = free_port(), free_port()
    url = f"http://127.0.0.1:{port}"
    await stack.create_user("alice")
    model = stack.start_demo_model(model_port)
    server = stack.start_server(port)
    tokens = await asyncio.gather(*map(stack.create_worker_token, names))
    await asyncio.gather(wait_healthy(url, server), wait_port(model_port, model))
    workers = {n: stack.start_worker(n, t, url, model_url=f"http://127.0.0.1:{model_port}/v1")
               for n, t in zip(names, tokens, strict=True)}
    return url, server, workers


def _completed(detail: dict[str, Any]) -> dict[str, str]:
    return {s["key"]: s["completed_at"] for s in detail["subtasks"]
            if s["status"] == "completed"}


async def _each_ran_once(client: httpx.AsyncClient, detail: dict[str, Any]) -> None:
    keys = Counter(s["key"] for s in detail["subtasks"])
    assert all(n == 1 for n in keys.values()), keys
    for sub in detail["subtasks"]:
        history = (await client.get(f"/api/v1/subtasks/{sub['subtask_id']}")).json()
        statuses = [h["status"] for h in history["attempt_history"]]
        assert statuses.count("succeeded") == 1, (sub["key"], statuses)


async def test_the_control_plane_killed_mid_route_resumes_without_deciding_twice(
    stack: Cluster,
) -> None:
    url, server, workers = await _start(stack, ("w1",))
    async with signed_in(url, "alice") as client:
        await wait_workers_online(client, set(workers), [server, *workers.values()])
        task_id = await submit(client, {
            "workflow": "supervisor",
            "description": f"Find an Indian restaurant near Taipei 101 and reserve a table "
                           f"for tomorrow at 7 PM {SLOW}"})
        before = await wait_task(client, task_id, within=30, what="the route's first hops",
                                 procs=[server, *workers.values()],
                                 until=lambda d: "googlemap#1" in _completed(d))
        await server.kill()
        assert "summarize#1" not in _completed(before), "the crash came too late"

        restarted = stack.start_server(int(url.rsplit(":", 1)[1]), name="server-restarted")
        await wait_healthy(url, restarted)
        detail = await wait_task(client, task_id, within=60, what="the task to finish",
                                 procs=[restarted, *workers.values()],
                                 until=lambda d: d["status"] in ("completed", "failed"))
        assert detail["status"] == "completed", detail
        for key, completed_at in _completed(before).items():
            assert _completed(detail)[key] == completed_at  # done before: not run again
        await _each_ran_once(client, detail)
        state = (await client.get(f"/api/v1/tasks/{task_id}/state")).json()["state"]
        assert state["execution_order"] == ["googlemap", "calendar", "telephone"]
        events = await sse_events(client, task_id, until={"task_complete"}, last_event_id=0)
        hops = [(e["data"]["hop"], e["data"]["next"]) for e in events
                if e["type"] == "route_decision"]
        assert hops == [(1, "googlemap"), (2, "calendar"), (3, "telephone"), (3, "summarize")]


async def test_a_worker_killed_mid_loop_loses_nothing_and_the_loop_goes_on(
    stack: Cluster,
) -> None:
    url, server, workers = await _start(stack, ("wa", "wb"))
    procs = [server, *workers.values()]
    async with signed_in(url, "alice") as client:
        ids = await wait_workers_online(client, set(workers), procs)
        task_id = await submit(client, {"workflow": "pipeline",
                                        "description": f"Cats in cities {SLOW}"})

        async def writing_again() -> dict[str, Any] | None:
            detail = (await client.get(f"/api/v1/tasks/{task_id}")).json()
            return next((s for s in detail["subtasks"] if s["key"] == "write#2"
                         and s["status"] == "in_progress" and s["assigned_worker_id"]), None)

        running = await wait_for(writing_again, within=40, what="the revision running",
                                 procs=procs)
        victim = next(n for n, wid in ids.items() if wid == running["assigned_worker_id"])
        await workers[victim].kill()
        survivor = next(n for n in workers if n != victim)
        detail = await wait_task(client, task_id, within=60, what="the task to finish",
                                 procs=[server, workers[survivor]],
                                 until=lambda d: d["status"] in ("completed", "failed"))
        assert detail["status"] == "completed", detail
        assert sorted(_completed(detail)) == [
            "plan#1", "research#1.1", "research#1.2", "research#1.3", "review#1", "review#2",
            "write#1", "write#2"]
        await _each_ran_once(client, detail)
        rewrite = next(s for s in detail["subtasks"] if s["key"] == "write#2")
        history = (await client.get(f"/api/v1/subtasks/{rewrite['subtask_id']}")).json()
        assert [h["status"] for h in history["attempt_history"]] == ["expired", "succeeded"]
        assert "Add a one-paragraph summary" in history["description"]  # the feedback, kept


QUESTION = """\
name: asking
version: 1
description: Ask a person, then write for them.
roles:
  writer: {prompt: "Write notes.md: notes on {query} for {reader}"}
steps:
  - {id: reader, kind: human, question: "Who will read the notes on {query}?"}
  - {id: notes, kind: agent, role: writer, after: [reader]}
"""


async def test_a_question_survives_the_control_plane_being_killed_while_it_waits(
    stack: Cluster,
) -> None:
    url, server, workers = await _start(stack, ("w1",))
    async with signed_in(url, "alice") as client:
        await wait_workers_online(client, set(workers), [server, *workers.values()])
        added = await client.post("/api/v1/workflows", json={"document": QUESTION})
        assert added.status_code == 201, added.text
        task_id = await submit(client, {"workflow": "asking", "description": "city cats"})
        await wait_task(client, task_id, within=30, what="the question",
                        procs=[server, *workers.values()],
                        until=lambda d: d["status"] == "awaiting_input")
        await server.kill()

        restarted = stack.start_server(int(url.rsplit(":", 1)[1]), name="server-restarted")
        await wait_healthy(url, restarted)
        page = (await client.get("/api/v1/checkpoints", params={
            "task_id": task_id, "status": "pending_review"})).json()
        [question] = page["checkpoints"]
        assert question["question"] == "Who will read the notes on city cats?"
        answered = await client.post(
            f"/api/v1/checkpoints/{question['checkpoint_id']}/answer",
            json={"answer": "the neighbours"})
        assert answered.status_code == 200, answered.text
        detail = await wait_task(client, task_id, within=60, what="the task to finish",
                                 procs=[restarted, *workers.values()],
                                 until=lambda d: d["status"] in ("completed", "failed"))
    assert detail["status"] == "completed", detail
    assert sorted(s["key"] for s in detail["subtasks"]) == ["notes#1", "reader#1"]
