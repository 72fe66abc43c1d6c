"""Budgets, end to end: a task's tokens, cost and time, a user's day, and an admin's limits
for one user. A budget of tokens stops a task at its first model call past it; what its steps
finished is kept; a user who spent their day is refused until midnight UTC."""

from __future__ import annotations

import contextlib
import io
import zipfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx

from shoal import admin
from shoal.api.server import RunningServer, running_server
from shoal.demo.fake.exchange import recorded_requests
from shoal.demo.model import create_demo_model_app, running_demo_model
from shoal.tools.agent_loop import OpenAICompatTool
from shoal.tools.echo import EchoTool
from tests.conftest import make_settings
from tests.runtime.harness import (
    echo_worker,
    login,
    task_detail,
    wait_for_status,
)

NOTES = {"name": "notes", "description": "write the notes", "tool": "echo",
         "options": {"files": {"notes.txt": "what was found"}}}
CODE = {"name": "code", "description": "Build a CLI todo app with tests",
        "tool": "openai_compat", "dependencies": ["notes"]}


@contextlib.asynccontextmanager
async def plane(tmp_path: Path, **settings: Any) -> AsyncIterator[
        tuple[RunningServer, httpx.AsyncClient, Any]]:
    """A control plane, the demo model, one worker with the agent loop and the echo tool,
    and alice signed in; yields the server, her client and the model's app."""
    model = create_demo_model_app()
    config = make_settings(tmp_path, **settings)
    async with running_demo_model(model) as url, running_server(config) as srv:
        agent = OpenAICompatTool(base_url=url, api_key="sk-test", model="shoal-demo")
        async with echo_worker(srv, config, tools={"openai_compat": agent,
                                                   "echo": EchoTool()}):
            client = await login(srv, config)
            try:
                yield srv, client, model
            finally:
                await client.aclose()


async def test_a_token_budget_stops_the_task_and_keeps_what_was_done(tmp_path: Path) -> None:
    """With 1 token to spend, the agent makes one model call, the task ends
    `budget_exceeded` saying which limit, and the finished step's file downloads."""
    async with plane(tmp_path) as (_, client, model):
        resp = await client.post("/api/v1/tasks", json={
            "description": "Notes, then code", "plan": [NOTES, CODE], "budget": {"tokens": 1}})
        assert resp.status_code == 201, resp.text
        task_id = resp.json()["task_id"]
        detail = await wait_for_status(client, task_id, "budget_exceeded")
        assert detail["budget"] == {"tokens": 1}
        assert detail["budget_remaining"] == {"tokens": 0}
        assert "budget ran out (tokens" in detail["error"]
        assert len(recorded_requests(model, "openai_chat")) == 1
        zipped = await client.get(f"/api/v1/tasks/{task_id}/download")
        assert zipfile.ZipFile(io.BytesIO(zipped.content)).read("notes.txt") == b"what was found"



async def test_a_time_budget_stops_a_task_that_runs_too_long(tmp_path: Path) -> None:
    """A task allowed half a second, whose step takes ten, ends `budget_exceeded` (seconds)."""
    async with plane(tmp_path) as (_, client, _):
        resp = await client.post("/api/v1/tasks", json={
            "description": "Too slow", "budget": {"seconds": 0.5},
            "plan": [{"name": "slow", "description": "wait", "tool": "echo",
                      "options": {"delay": 10}}]})
        detail = await wait_for_status(client, resp.json()["task_id"], "budget_exceeded",
                                       within=10)
        assert "seconds" in detail["error"]
        assert detail["subtasks"][0]["status"] == "cancelled"


async def test_a_spent_day_is_429_until_midnight(tmp_path: Path) -> None:
    """After a user spends the server's daily tokens, a submission is refused with 429 and a
    `Retry-After` up to midnight UTC."""
    async with plane(tmp_path, daily_tokens=1) as (_, client, _):
        first = await client.post("/api/v1/tasks", json={"description": "Spend",
                                                         "plan": [{**CODE, "dependencies": []}]})
        assert first.status_code == 201, first.text
        await wait_for_status(client, first.json()["task_id"], "completed", "failed")
        refused = await client.post("/api/v1/tasks", json={"description": "More"})
        assert refused.status_code == 429, refused.text
        assert refused.json()["error"] == "daily_budget_spent"
        assert 0 < int(refused.headers["retry-after"]) <= 86_400
        assert "midnight UTC" in refused.json()["message"]


async def test_an_admin_sets_a_users_own_limits(tmp_path: Path) -> None:
    """An admin gives alice one active task: her second waits; she cannot change it herself;
    null gives the server's limit back."""
    async with plane(tmp_path) as (srv, client, _):
        await admin.create_user(srv.services.db, srv.services.settings, username="root",
                                password="password123", admin=True)
        root = await login_existing(srv, "root")
        me = (await client.get("/api/v1/users/me")).json()
        try:
            set_one = await root.patch(f"/api/v1/users/{me['user_id']}",
                                       json={"max_active_tasks": 1})
            assert set_one.status_code == 200, set_one.text
            assert set_one.json()["max_active_tasks"] == 1
            assert (await client.patch(f"/api/v1/users/{me['user_id']}",
                                       json={"max_active_tasks": 9})).status_code == 403
            slow = {"name": "slow", "description": "wait", "tool": "echo",
                    "options": {"delay": 2}}
            first = await client.post("/api/v1/tasks", json={"description": "a", "plan": [slow]})
            second = await client.post("/api/v1/tasks", json={"description": "b", "plan": [slow]})
            assert first.json()["status"] != "queued"
            assert second.json()["status"] == "queued"
            back = await root.patch(f"/api/v1/users/{me['user_id']}",
                                    json={"max_active_tasks": None})
            assert back.json()["max_active_tasks"] is None
            assert (await root.patch(f"/api/v1/users/{srv.services.settings.secret_key[:4]}",
                                     json={})).status_code == 404
            await wait_for_status(client, second.json()["task_id"], "completed", within=20)
            assert (await task_detail(client, first.json()["task_id"]))["status"] == "completed"
        finally:
            await root.aclose()


async def login_existing(srv: RunningServer, name: str) -> httpx.AsyncClient:
    """A client signed in as an existing user."""
    client = httpx.AsyncClient(base_url=srv.url, timeout=30)
    resp = await client.post("/api/v1/auth/login", json={"username": name,
                                                         "password": "password123"})
    resp.raise_for_status()
    client.headers["Authorization"] = f"Bearer {resp.json()['access_token']}"
    return client
