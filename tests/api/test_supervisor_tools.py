"""The whole `supervisor` task on each agent a worker may have — the real Claude Code, Codex
and Gemini CLIs and Shoal's agent loop, against the fake model server: every role answers
through that agent, the specialists use their MCP servers, and the calendar's .ics file and
the telephone's call record come back among the task's files."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest

from shoal.api.server import running_server
from shoal.config import Settings
from shoal.demo.fake.server import running_fake_server
from shoal.demo.model import create_demo_model_app
from tests.runtime.harness import echo_worker, login, wait_for_status
from tests.tools.test_mcp import TOOLS, make_tool

pytestmark = pytest.mark.timeout(240)


@pytest.mark.parametrize("tool_name", TOOLS)
async def test_the_restaurant_booking_runs_on_each_agent(
        settings: Settings, tmp_path: Path, tool_name: str) -> None:
    async with running_fake_server(create_demo_model_app()) as root, \
            running_server(settings) as srv:
        tool = make_tool(tool_name, tmp_path, root)
        async with echo_worker(srv, settings, tools={tool_name: tool}, slots=1):
            client = await login(srv, settings)
            try:
                resp = await client.post("/api/v1/tasks", json={
                    "workflow": "supervisor", "description": "Find an Indian restaurant "
                    "near Taipei 101 and reserve a table for tomorrow at 7 PM"})
                assert resp.status_code == 201, resp.text
                task_id = resp.json()["task_id"]
                detail = await wait_for_status(client, task_id, "completed", "failed",
                                               within=200)
                state = (await client.get(f"/api/v1/tasks/{task_id}/state")).json()["state"]
                archive = (await client.get(f"/api/v1/tasks/{task_id}/download")).content
            finally:
                await client.aclose()
    assert detail["status"] == "completed", detail
    assert {s["assigned_tool"] for s in detail["subtasks"]} == {tool_name}
    assert state["execution_order"] == ["googlemap", "calendar", "telephone"]
    names = zipfile.ZipFile(io.BytesIO(archive)).namelist()
    assert any(n.startswith("calendar/") and n.endswith(".ics") for n in names), names
    assert "calls/1-886281018846.md" in names
