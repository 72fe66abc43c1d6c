"""The REST API, the client WebSocket and the plain endpoints, over real HTTP."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from shoal import admin
from shoal.api.server import RunningServer
from shoal.config import Settings
from shoal.worker.agent import Worker
from tests.runtime.harness import (
    DEADLINE,
    submit,
    wait_for_status,
)

ECHO: list[dict[str, Any]] = [
    {"name": "a", "description": "first", "tool": "echo"},
    {"name": "b", "description": "second", "tool": "echo", "dependencies": ["a"]},
]
SLOW: list[dict[str, Any]] = [
    {"name": "slow", "description": "waits", "tool": "echo", "options": {"delay": 30}},
]





def ws_url(server: RunningServer, token: str) -> str:
    return server.url.replace("http://", "ws://") + f"/ws?token={token}"


def access_token(client: httpx.AsyncClient) -> str:
    return client.headers["Authorization"].removeprefix("Bearer ")


async def receive(ws: ClientConnection, kind: str) -> dict[str, Any]:
    """The next message of type `kind`, skipping others."""
    async with asyncio.timeout(DEADLINE):
        while True:
            msg = json.loads(await ws.recv())
            if msg["type"] == kind:
                return dict(msg)


# ---- tasks ----------------------------------------------------------------------------------


async def test_submit_answers_201_with_id_status_and_message(
    client: httpx.AsyncClient, worker: Worker
) -> None:
    """A submission answers 201 with exactly task_id, status and message."""
    resp = await client.post("/api/v1/tasks", json={"description": "Echo", "plan": ECHO})
    assert resp.status_code == 201, resp.text
    body = resp.json()
    assert set(body) == {"task_id", "status", "message"}
    assert body["status"] in {"pending", "in_progress"}
    assert body["message"]


async def test_task_detail_has_the_seed_shape(client: httpx.AsyncClient, worker: Worker) -> None:
    """A finished task's detail carries the seed's keys for the task and each subtask."""
    task_id = await submit(client, ECHO)
    detail = await wait_for_status(client, task_id, "completed", "failed")
    assert {
        "task_id",
        "description",
        "status",
        "progress",
        "created_at",
        "updated_at",
        "subtasks",
        "checkpoints",
        "evaluation_scores",
    } <= set(detail)
    assert (detail["task_id"], detail["status"], detail["progress"]) == (task_id, "completed", 100)
    assert detail["checkpoints"] == []
    for sub in detail["subtasks"]:
        assert {
            "subtask_id",
            "name",
            "status",
            "progress",
            "assigned_worker",
            "assigned_tool",
            "started_at",
        } <= set(sub)
        assert (sub["status"], sub["assigned_worker"], sub["assigned_tool"]) == (
            "completed",
            "w1",
            "echo",
        )
        assert sub["started_at"] is not None
    assert [s["name"] for s in detail["subtasks"]] == ["a", "b"]


async def test_unknown_task_is_404(client: httpx.AsyncClient) -> None:
    """A task id that does not exist answers 404 not_found."""
    resp = await client.get("/api/v1/tasks/00000000-0000-0000-0000-000000000000")
    assert resp.status_code == 404
    assert resp.json()["error"] == "not_found"


async def test_list_filters_by_status(client: httpx.AsyncClient, worker: Worker) -> None:
    """The status filter counts and returns only tasks in that status."""
    ids = [await submit(client, SLOW) for _ in range(3)]
    assert (await client.post(f"/api/v1/tasks/{ids[1]}/cancel")).status_code == 200
    page = (await client.get("/api/v1/tasks", params={"status": "cancelled"})).json()
    assert page["total"] == 1
    assert [t["task_id"] for t in page["tasks"]] == [ids[1]]


async def test_list_pages_newest_first(client: httpx.AsyncClient, worker: Worker) -> None:
    """limit and offset page through every task, newest first, with the full total."""
    ids = [await submit(client, SLOW) for _ in range(3)]
    first = (await client.get("/api/v1/tasks", params={"limit": 2})).json()
    second = (await client.get("/api/v1/tasks", params={"limit": 2, "offset": 2})).json()
    assert (first["total"], first["limit"], first["offset"]) == (3, 2, 0)
    assert (second["total"], second["limit"], second["offset"]) == (3, 2, 2)
    assert [t["task_id"] for t in first["tasks"] + second["tasks"]] == ids[::-1]


async def test_list_filters_by_workflow_and_search(
    client: httpx.AsyncClient, worker: Worker
) -> None:
    """`workflow` keeps one workflow's tasks; `q` finds words in the description whatever
    their case, with `%` and `_` taken literally; each list shows workflow and usage."""
    made = {}
    for name, body in (
            ("sales", {"description": "Compare SALES figures", "plan": SLOW}),
            ("percent", {"description": "Raise by 5% now", "plan": SLOW}),
            ("pipeline", {"description": "Compare two databases", "workflow": "pipeline"})):
        resp = await client.post("/api/v1/tasks", json=body)
        assert resp.status_code == 201, resp.text
        made[name] = resp.json()["task_id"]

    async def listed(**params: str) -> list[str]:
        page = (await client.get("/api/v1/tasks", params=params)).json()
        assert page["total"] == len(page["tasks"])
        return sorted(t["task_id"] for t in page["tasks"])

    assert await listed(q="compare") == sorted([made["sales"], made["pipeline"]])
    assert await listed(q="compare", workflow="pipeline") == [made["pipeline"]]
    assert await listed(q="5%") == [made["percent"]]
    assert await listed(q="5_") == []
    assert await listed(workflow="dag") == sorted([made["sales"], made["percent"]])
    shown = (await client.get("/api/v1/tasks", params={"workflow": "pipeline"})).json()
    assert shown["tasks"][0]["workflow"] == "pipeline"
    assert shown["tasks"][0]["usage"] == {"input_tokens": 0, "output_tokens": 0, "cost_usd": 0.0}


async def test_list_finds_a_task_by_the_start_of_its_id(
    client: httpx.AsyncClient, worker: Worker
) -> None:
    """`id_prefix` keeps the tasks whose id starts with it, with the id's dashes or without,
    in any case (how `shoal` looks up a short id)."""
    ids = [await submit(client, SLOW) for _ in range(2)]

    async def listed(prefix: str) -> list[str]:
        page = (await client.get("/api/v1/tasks", params={"id_prefix": prefix})).json()
        assert page["total"] == len(page["tasks"])
        return [t["task_id"] for t in page["tasks"]]

    for task_id in ids:
        assert await listed(task_id[:8]) == [task_id]
        assert await listed(task_id[:13].upper()) == [task_id]
        assert await listed(task_id.replace("-", "")) == [task_id]


@pytest.mark.parametrize("params", [{"limit": 0}, {"status": "bogus"}, {"workflow": "No!"},
                                    {"q": "x" * 201}, {"q": "nul\x00byte"},
                                    {"id_prefix": "xyz"}, {"id_prefix": "-ab"},
                                    {"id_prefix": "a" * 33}])
async def test_list_refuses_bad_parameters(
    client: httpx.AsyncClient, params: dict[str, Any]
) -> None:
    """An out-of-range limit, an unknown status, a malformed workflow name, a search that is
    too long or cannot be stored, or an id prefix that no id could start with is a 422
    naming the parameter."""
    resp = await client.get("/api/v1/tasks", params=params)
    assert resp.status_code == 422
    assert resp.json()["error"] in {"validation_error", "invalid_input"}
    assert next(iter(params)) in resp.text


# ---- auth -----------------------------------------------------------------------------------


async def test_wrong_password_is_401(client: httpx.AsyncClient) -> None:
    """A wrong password answers 401 invalid_credentials."""
    resp = await client.post(
        "/api/v1/auth/login", json={"username": "alice", "password": "wrong-password"}
    )
    assert resp.status_code == 401
    assert resp.json()["error"] == "invalid_credentials"


async def token_pair(server: RunningServer, settings: Settings) -> dict[str, Any]:
    """A new user "bob" and the token pair his login answers with."""
    await admin.create_user(server.services.db, settings, username="bob", password="password123")
    async with httpx.AsyncClient(base_url=server.url) as anon:
        resp = await anon.post(
            "/api/v1/auth/login", json={"username": "bob", "password": "password123"}
        )
    assert resp.status_code == 200, resp.text
    return dict(resp.json())


async def test_refresh_gives_a_working_access_token(
    server: RunningServer, settings: Settings
) -> None:
    """A refresh token buys a new pair whose access token works."""
    pair = await token_pair(server, settings)
    async with httpx.AsyncClient(base_url=server.url) as anon:
        fresh = await anon.post(
            "/api/v1/auth/refresh", json={"refresh_token": pair["refresh_token"]}
        )
        assert fresh.status_code == 200, fresh.text
        me = await anon.get(
            "/api/v1/users/me", headers={"Authorization": f"Bearer {fresh.json()['access_token']}"}
        )
    assert me.status_code == 200
    assert me.json()["username"] == "bob"


async def test_refresh_token_is_not_an_access_token(
    server: RunningServer, settings: Settings
) -> None:
    """A refresh token sent as a bearer token is refused with 401."""
    pair = await token_pair(server, settings)
    async with httpx.AsyncClient(base_url=server.url) as anon:
        resp = await anon.get(
            "/api/v1/users/me", headers={"Authorization": f"Bearer {pair['refresh_token']}"}
        )
    assert resp.status_code == 401
    assert "access token" in resp.json()["message"]


# ---- client WebSocket -----------------------------------------------------------------------


async def test_ws_with_bad_token_is_closed(server: RunningServer) -> None:
    """A /ws connection with a bad token is refused before any message."""
    try:
        async with connect(ws_url(server, "not-a-token")) as ws:
            await ws.recv()
        outcome: tuple[str, int | None] = ("open", None)
    except InvalidStatus as exc:
        outcome = ("http", exc.response.status_code)
    except ConnectionClosed as exc:
        outcome = ("close", exc.rcvd.code if exc.rcvd else None)
    assert outcome in {("http", 403), ("close", 4401)}


async def test_ws_ping_gets_pong(server: RunningServer, client: httpx.AsyncClient) -> None:
    """A ping on /ws is answered with a pong."""
    async with connect(ws_url(server, access_token(client))) as ws:
        await ws.send(json.dumps({"type": "ping"}))
        assert (await receive(ws, "pong"))["type"] == "pong"


async def test_ws_subscription_delivers_only_chosen_types(
    server: RunningServer, client: httpx.AsyncClient, worker: Worker
) -> None:
    """After subscribing to task_update, a whole task run delivers nothing else."""
    async with connect(ws_url(server, access_token(client))) as ws:
        await ws.send(json.dumps({"type": "subscribe", "event_types": ["task_update"]}))
        await receive(ws, "subscribed")
        await submit(client, ECHO)
        seen: list[dict[str, Any]] = []
        async with asyncio.timeout(DEADLINE):
            while not seen or seen[-1]["data"].get("status") != "completed":
                seen.append(json.loads(await ws.recv()))
    assert {m["type"] for m in seen} == {"task_update"}
    assert all(isinstance(m["seq"], int) and m["timestamp"] for m in seen)


async def test_ws_following_a_task_replays_it_then_says_caught_up(
    server: RunningServer, client: httpx.AsyncClient, worker: Worker
) -> None:
    """Following task A from `since` 0 replays A's events only, then `caught_up`; the
    `any_task_types` of another task B arrive live, and nothing else of B's."""
    first = await submit(client, ECHO)
    await wait_for_status(client, first, "completed")
    async with connect(ws_url(server, access_token(client))) as ws:
        await ws.send(json.dumps({"type": "subscribe", "task_id": first, "since": 0,
                                  "any_task_types": ["task_created", "task_complete"]}))
        await receive(ws, "subscribed")
        replayed: list[dict[str, Any]] = []
        async with asyncio.timeout(DEADLINE):
            while (msg := json.loads(await ws.recv()))["type"] != "caught_up":
                replayed.append(msg)
        assert {m["data"].get("task_id") for m in replayed} == {first}
        assert {"task_created", "task_complete"} <= {m["type"] for m in replayed}
        assert msg["data"]["seq"] == replayed[-1]["seq"]
        second = await submit(client, ECHO)
        live: list[dict[str, Any]] = []
        async with asyncio.timeout(DEADLINE):
            while not live or live[-1]["type"] != "task_complete":
                live.append(json.loads(await ws.recv()))
    assert [(m["type"], m["data"]["task_id"]) for m in live] == [
        ("task_created", second), ("task_complete", second)]


async def test_ws_batch_sends_a_queued_up_replay_in_few_frames_in_order(
    server: RunningServer, client: httpx.AsyncClient, worker: Worker
) -> None:
    """With `batch`, a replay goes out as `batch` frames: the same events, in the same order,
    as a subscription without it sends one frame each."""
    task_id = await submit(client, ECHO)
    await wait_for_status(client, task_id, "completed")

    async def replayed(batch: bool) -> tuple[list[dict[str, Any]], int]:
        frames = 0
        items: list[dict[str, Any]] = []
        async with connect(ws_url(server, access_token(client))) as ws:
            await ws.send(json.dumps({"type": "subscribe", "task_id": task_id, "since": 0,
                                      "batch": batch}))
            await receive(ws, "subscribed")
            async with asyncio.timeout(DEADLINE):
                while True:
                    frame = json.loads(await ws.recv())
                    frames += 1
                    items += frame["items"] if frame["type"] == "batch" else [frame]
                    if items[-1]["type"] == "caught_up":
                        return items, frames

    one_by_one, frames_plain = await replayed(False)
    together, frames_batched = await replayed(True)
    assert [(m["type"], m.get("seq")) for m in together] == [
        (m["type"], m.get("seq")) for m in one_by_one]
    assert frames_plain == len(one_by_one) > 5
    assert frames_batched < frames_plain


# ---- plain endpoints ------------------------------------------------------------------------


async def test_healthz_answers(server: RunningServer) -> None:
    """/healthz answers ok without authentication."""
    async with httpx.AsyncClient(base_url=server.url) as anon:
        resp = await anon.get("/healthz")
    assert resp.status_code == 200
    assert resp.json()["status"] == "ok"


async def test_metrics_answers(server: RunningServer) -> None:
    """/metrics serves Prometheus text with Shoal's gauges."""
    async with httpx.AsyncClient(base_url=server.url) as anon:
        resp = await anon.get("/metrics")
    assert resp.status_code == 200
    assert "shoal_active_tasks" in resp.text


async def test_openapi_is_served(server: RunningServer) -> None:
    """The OpenAPI document and its /docs page are served."""
    async with httpx.AsyncClient(base_url=server.url) as anon:
        schema = await anon.get("/openapi.json")
        docs = await anon.get("/docs")
    assert schema.status_code == 200
    assert "/api/v1/tasks" in schema.json()["paths"]
    assert docs.status_code == 200
    assert "swagger" in docs.text.lower()


async def test_the_attempts_of_a_task_make_its_timeline(
    client: httpx.AsyncClient, worker: Worker
) -> None:
    """Each attempt with its step, worker and times, in the order they were sent."""
    task_id = await submit(client, ECHO)
    await wait_for_status(client, task_id, "completed")
    found = (await client.get(f"/api/v1/tasks/{task_id}/attempts")).json()["attempts"]
    assert [(a["subtask_name"], a["status"], a["worker_name"]) for a in found] == [
        ("a", "succeeded", "w1"), ("b", "succeeded", "w1")]
    assert all(a["dispatched_at"] <= a["finished_at"] for a in found)
    assert (await client.get(f"/api/v1/tasks/{uuid.uuid4()}/attempts")).status_code == 404
