"""Model text streams from the worker to the task's watchers as `agent_token` events, live
only: over SSE with no id (so Last-Event-ID stays put), never stored or replayed, and kept in
the attempt's log as whole lines."""

from __future__ import annotations

import json
from typing import Any

import httpx

from shoal.api.server import running_server
from shoal.config import Settings
from shoal.metrics import StreamKind
from tests.runtime.harness import (
    GatedEcho,
    demo_plane,
    echo_worker,
    login,
    sse_events,
    submit,
    task_detail,
    wait_until,
)

# A long final answer in 48-character pieces, 60 ms apart: it streams for over a second.
WRITE = "Write notes.md: what cats do in cities [demo:long=900] [demo:pace=0.06]"


async def _raw_sse(client: httpx.AsyncClient, task_id: str) -> list[tuple[bool, dict[str, Any]]]:
    """Each event of the task's SSE stream until it ends, with whether it carried an id."""
    seen: list[tuple[bool, dict[str, Any]]] = []
    has_id = False
    async with client.stream("GET", f"/api/v1/tasks/{task_id}/events") as resp:
        async for line in resp.aiter_lines():
            if line.startswith("id: "):
                has_id = True
            elif line.startswith("data: "):
                seen.append((has_id, json.loads(line[6:])))
                has_id = False
                if seen[-1][1]["type"] in ("task_complete", "task_failed"):
                    return seen
    return seen


async def test_model_text_streams_live_and_is_kept_as_log_lines(settings: Settings) -> None:
    async with demo_plane(settings) as (_srv, client):
        resp = await client.post("/api/v1/tasks", json={
            "description": "Notes", "quality": "off",
            "plan": [{"name": "notes", "tool": "openai_compat",
                      "description": WRITE}]})
        assert resp.status_code == 201, resp.text
        task_id = resp.json()["task_id"]
        live = await _raw_sse(client, task_id)
        replayed = await sse_events(client, task_id,
                                    until={"task_complete", "task_failed"})
        detail = await task_detail(client, task_id)
        sub = (await client.get(
            f"/api/v1/subtasks/{detail['subtasks'][0]['subtask_id']}")).json()
    assert live[-1][1]["type"] == "task_complete"
    tokens = [(has_id, e) for has_id, e in live if e["type"] == "agent_token"]
    assert len(tokens) >= 2, "the answer streamed in one piece"
    assert not any(has_id for has_id, _ in tokens)  # no id: Last-Event-ID never moves back
    assert all(e["seq"] == 0 for _, e in tokens)
    assert {e["data"]["subtask_id"] for _, e in tokens} == {sub["subtask_id"]}
    assert "".join(e["data"]["text"] for _, e in tokens) == sub["output"]["text"]
    completed = next(i for i, (_, e) in enumerate(live) if e["type"] == "subtask_update"
                     and e["data"]["status"] == "completed")
    assert live.index(tokens[0]) < completed  # live, while the subtask ran
    assert not any(e["type"] == "agent_token" for e in replayed)  # never stored
    logged = "\n".join(e["data"]["message"] for e in replayed if e["type"] == "agent_log")
    assert "lorem lorem" in logged  # the streamed text, kept as whole lines


async def test_an_sse_client_that_leaves_ends_its_stream_on_the_server(
    settings: Settings,
) -> None:
    """The server asks whether an SSE client left only on keep-alive ticks; a client that goes
    away mid-task still ends its stream there at once (uvicorn's disconnect cancels it), and
    its bus subscription with it."""
    tool = GatedEcho()
    async with running_server(settings) as srv, echo_worker(srv, settings,
                                                            tools={"echo": tool}):
        client = await login(srv, settings)
        try:
            task_id = await submit(client, [{"name": "held", "description": "echo",
                                             "tool": "echo", "options": {"gated": True}}])
            streams = srv.services.runtime.metrics.streams.values
            async with client.stream("GET", f"/api/v1/tasks/{task_id}/events") as resp:
                async for line in resp.aiter_lines():
                    if line.startswith("data: "):
                        break
                assert streams[(StreamKind.SSE.value,)] == 1
            await wait_until(lambda: streams[(StreamKind.SSE.value,)] == 0,
                             what="the stream to end on the server")
            tool.gate.set()
        finally:
            await client.aclose()
