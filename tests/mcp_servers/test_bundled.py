"""Shoal's bundled MCP servers, reached through the official SDK's client over stdio, as an
agent reaches them: `shoal mcp places`, `calendar` and `telephone`."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from icalendar import Calendar
from mcp import Client, StdioServerParameters

from shoal.protocol import McpServer
from shoal.tools.agent_loop import OpenAICompatTool
from shoal.tools.base import ToolRun
from shoal.tools.mcp_config import launch

pytestmark = pytest.mark.timeout(60)


@contextlib.asynccontextmanager
async def connected(name: str, workspace: Path) -> AsyncIterator[Client]:
    """A client of the bundled server `name`, started as a worker starts it."""
    how = launch(McpServer(name=name, command="shoal", args=["mcp", name]), workspace)
    async with Client(StdioServerParameters(command=how.command, args=list(how.args),
                                            env=how.env, cwd=str(workspace))) as client:
        yield client


def ics_files(root: Path) -> list[Path]:
    return sorted(root.rglob("*.ics"))


async def call(client: Client, tool: str, **arguments: object) -> Any:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result
    return json.loads(getattr(result.content[0], "text", ""))


async def test_places_finds_what_is_asked_near_the_landmark(tmp_path: Path) -> None:
    async with connected("places", tmp_path) as places:
        found = await call(places, "search_places", query="Indian restaurant",
                           near="Taipei 101")
        nothing = await call(places, "search_places", query="sushi", near="Taipei 101")
    assert [p["name"] for p in found] == ["Saffron 46", "Tandoor Xinyi"]
    assert found[0]["phone"] == "+886 2 8101 8846"
    assert nothing == []


async def test_calendar_writes_an_ics_file_a_calendar_can_read(tmp_path: Path) -> None:
    async with connected("calendar", tmp_path) as calendar:
        written = await call(calendar, "add_calendar_event", title="Dinner / at: Saffron 46",
                             start="2026-11-26T19:00", duration_minutes=90,
                             location="46F, Xinyi Road; Taipei")
        refused = await call(calendar, "add_calendar_event", title="x", start="tomorrow 7pm")
    assert written["file"] == "calendar/2026-11-26-dinner-at-saffron-46.ics"
    parsed = Calendar.from_ical((tmp_path / written["file"]).read_bytes())
    event = parsed.walk("VEVENT")[0]
    assert str(event["SUMMARY"]) == "Dinner / at: Saffron 46"
    assert str(event["LOCATION"]) == "46F, Xinyi Road; Taipei"  # escaped and read back
    assert (event.decoded("DTEND") - event.decoded("DTSTART")).seconds == 90 * 60
    assert "ISO 8601" in refused["error"]
    assert ics_files(tmp_path) == [tmp_path / written["file"]]


async def test_telephone_records_the_call_and_dials_nothing(tmp_path: Path) -> None:
    async with connected("telephone", tmp_path) as telephone:
        first = await call(telephone, "make_phone_call", phone="+886 2 8101 8846",
                           message="A table for two at 19:00", callee="Saffron 46")
        second = await call(telephone, "make_phone_call", phone="+886-2-2722-0101",
                            message="Hi")
        refused = await call(telephone, "make_phone_call", phone="call me", message="x")
    assert first["dialled"] is False
    assert [first["recorded"], second["recorded"]] == [
        "calls/1-886281018846.md", "calls/2-886227220101.md"]
    record = (tmp_path / "calls/1-886281018846.md").read_text()
    assert "No call was placed" in record
    assert "A table for two at 19:00" in record
    assert "not a phone number" in refused["error"]


def test_an_unknown_server_is_refused_by_name() -> None:
    done = subprocess.run([sys.executable, "-m", "shoal", "mcp", "weather"],
                          capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 2
    assert "No bundled MCP server 'weather'" in done.stdout


async def test_a_server_that_cannot_start_fails_the_attempt_saying_which(
        tmp_path: Path) -> None:
    logs: list[str] = []
    run = ToolRun(attempt_id=uuid.uuid4(), task_id=uuid.uuid4(), subtask_id=uuid.uuid4(),
                  role="calendar", name="calendar",
                  instructions="Add it.", workspace=tmp_path, timeout=30, log=logs.append,
                  mcp_servers=(McpServer(name="gone", command=str(tmp_path / "missing")),))
    tool = OpenAICompatTool(base_url="http://127.0.0.1:9/v1", api_key="k", model="m")
    outcome = await tool.run(run)
    assert outcome.status == "failed"
    assert "The MCP server(s) gone could not be used" in (outcome.error or "")


async def test_a_server_reached_by_url_serves_the_agent_loop_too(tmp_path: Path) -> None:
    """A role's MCP server named by `url` (Streamable HTTP), as the agent loop reaches it."""
    import asyncio

    import uvicorn

    from shoal.demo.fake.server import bind
    from shoal.mcp_servers.places import server
    from shoal.tools.mcp_config import connected as agent_tools
    from tests.runtime.harness import wait_until

    with bind("127.0.0.1", 0) as sock:
        web = uvicorn.Server(uvicorn.Config(server.streamable_http_app(), lifespan="on",
                                            log_level="warning", log_config=None))
        serving = asyncio.create_task(web.serve(sockets=[sock]))
        try:
            await wait_until(lambda: web.started or serving.done(), what="the MCP server")
            url = f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
            async with agent_tools([McpServer(name="places", url=url)], tmp_path) as tools:
                assert [d.name for d in tools.defs] == ["places__search_places"]
                found = json.loads(await tools.call(
                    "places__search_places", {"query": "Indian restaurant", "near": "Xinyi"}))
        finally:
            web.should_exit = True
            await serving
    assert found[0]["name"] == "Saffron 46"
