"""A role's MCP servers reach every agent: the real Claude Code, Codex and Gemini CLIs and
Shoal's agent loop each start Shoal's bundled servers (`shoal mcp …`), the fake model server
scripts the calls (as the demo model plays the `supervisor`'s specialists), and the calendar's
.ics file and the telephone's call record land in the workspace."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette

from shoal.demo.fake.exchange import request_log
from shoal.protocol import McpServer
from shoal.tools import mcp_config
from shoal.tools.agent_loop import OpenAICompatTool
from shoal.tools.base import Tool, ToolRun
from shoal.tools.claude_code import ClaudeCodeTool
from shoal.tools.claude_code import decide as claude_decide
from shoal.tools.codex import CodexTool
from shoal.tools.gemini_cli import GeminiCliTool
from shoal.tools.permissions import PermissionPolicy
from tests.conftest import make_settings, require_cli

pytestmark = pytest.mark.timeout(120)

CALENDAR = McpServer(name="calendar", command="shoal", args=["mcp", "calendar"])
TELEPHONE = McpServer(name="telephone", command="shoal", args=["mcp", "telephone"])
FOUND = ("What the other specialists found:\n[googlemap]\n[demo model] Found Saffron 46, "
         "No. 7 Xinyi Road, Taipei; phone +886 2 8101 8846; open 11:30-22:00.")
PROMPTS = {
    "calendar": "Supervisor role: calendar.\nAdd the event the request needs to the user's "
                "calendar.\n\nRequest: Book a table near Taipei 101 for tomorrow at 7 PM\n\n"
                + FOUND,
    "telephone": "Supervisor role: telephone.\nCall the place found to book the table.\n\n"
                 "Request: Book a table near Taipei 101 for tomorrow at 7 PM\n\n" + FOUND,
}
SERVERS = {"calendar": CALENDAR, "telephone": TELEPHONE}
TOOLS = ["claude_code", "codex", "gemini_cli", "openai_compat"]


def make_tool(name: str, tmp_path: Path, root: str) -> Tool:
    if name == "claude_code":
        binary = require_cli("claude")
        return ClaudeCodeTool(binary=binary, api_key="sk-ant-test", base_url=root,
                              settings=make_settings(tmp_path, claude_binary=binary))
    if name == "codex":
        settings = make_settings(tmp_path, codex_binary=require_cli("codex"),
                                 openai_base_url=f"{root}/v1", openai_api_key="sk-test",
                                 codex_model="shoal-demo", model_max_retries=0)
        return CodexTool(binary=settings.codex_binary, settings=settings)
    if name == "gemini_cli":
        settings = make_settings(tmp_path, gemini_binary=require_cli("gemini"),
                                 gemini_base_url=root, gemini_api_key="fake-key",
                                 model_max_retries=0)
        return GeminiCliTool(binary=settings.gemini_binary, settings=settings)
    return OpenAICompatTool(base_url=f"{root}/v1", api_key="sk-test", model="shoal-demo")


def make_run(tmp_path: Path, role: str, logs: list[str], **options: Any) -> ToolRun:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    return ToolRun(attempt_id=uuid.uuid4(), task_id=uuid.uuid4(), subtask_id=uuid.uuid4(),
                   role=role, name=role, instructions=PROMPTS[role], workspace=workspace,
                   timeout=90, log=logs.append, options=options,
                   mcp_servers=(SERVERS[role],))


@pytest.mark.parametrize("tool_name", TOOLS)
@pytest.mark.parametrize("role", ["calendar", "telephone"])
async def test_each_agent_uses_the_roles_mcp_server_and_its_file_lands_in_the_workspace(
        app: Starlette, root: str, tmp_path: Path, tool_name: str, role: str) -> None:
    logs: list[str] = []
    run = make_run(tmp_path, role, logs)
    outcome = await make_tool(tool_name, tmp_path, root).run(run)
    assert outcome.status == "succeeded", (outcome.error, logs[-20:])
    files = sorted(p.relative_to(run.workspace).as_posix()
                   for p in run.workspace.rglob("*") if p.is_file())
    if role == "calendar":
        written = [f for f in files if f.endswith("-dinner-at-saffron-46.ics")]
        assert written, (files, outcome.output, logs[-30:])
        assert [f for f in files if f.startswith("calendar/")] == written[:1], files
        ics = next(run.workspace.glob("calendar/*.ics")).read_text()
        assert "BEGIN:VEVENT" in ics
        assert "SUMMARY:Dinner at Saffron 46" in ics
        assert "T190000" in ics
        assert "calendar/" in outcome.output
    else:
        assert "calls/1-886281018846.md" in files, files
        record = (run.workspace / "calls/1-886281018846.md").read_text()
        assert "No call was placed" in record
        assert "nothing was dialled" in outcome.output
    called = [tool for entry in request_log(app) for tool in _offered(entry)]
    assert any(name.endswith(mcp_tool(role)) for name in called), called


def mcp_tool(role: str) -> str:
    return {"calendar": "add_calendar_event", "telephone": "make_phone_call"}[role]


def _offered(entry: Any) -> list[str]:
    """The tool names a recorded request offered, in any vendor's shape."""
    body = entry.body
    names = [t.get("name") or t.get("function", {}).get("name") for t in body.get("tools", [])
             if isinstance(t, dict)]
    names += [d["name"] for t in body.get("tools", []) if isinstance(t, dict)
              for d in t.get("functionDeclarations", [])]  # Gemini
    names += [f"{t['name']}__{d['name']}" for t in body.get("tools", []) if isinstance(t, dict)
              and t.get("type") == "namespace" for d in t.get("tools", [])]  # Codex
    return [n for n in names if n]


@pytest.mark.parametrize("tool_name", TOOLS)
async def test_a_policy_that_denies_mcp_withholds_the_servers(
        app: Starlette, root: str, tmp_path: Path, tool_name: str) -> None:
    logs: list[str] = []
    run = make_run(tmp_path, "calendar", logs, permissions={"mcp": "deny"})
    outcome = await make_tool(tool_name, tmp_path, root).run(run)
    assert not list(run.workspace.rglob("*.ics"))
    assert [(d.tool, d.target) for d in outcome.denials][:1] == [("mcp", "calendar")]
    called = [tool for entry in request_log(app) for tool in _offered(entry)]
    assert not any(name.endswith("add_calendar_event") for name in called)


def test_a_bundled_server_gets_the_embedding_settings_and_the_shared_index_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`shoal mcp …` servers get the worker's embedding settings and `<data>/index`; another
    server gets only its own environment."""
    monkeypatch.setenv("SHOAL_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("SHOAL_EMBEDDING_MODEL", "tiny")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-never")
    bundled = mcp_config.launch(CALENDAR, tmp_path)
    assert bundled.env["SHOAL_INDEX_DIR"] == str((tmp_path / "data" / "index").resolve())
    assert bundled.env["SHOAL_EMBEDDING_MODEL"] == "tiny"
    assert "ANTHROPIC_API_KEY" not in bundled.env
    other = mcp_config.launch(McpServer(name="x", command="x-server"), tmp_path)
    assert other.env == {"SHOAL_WORKSPACE": str(tmp_path)}


def test_each_cli_gets_the_servers_in_its_own_form(tmp_path: Path) -> None:
    launch = mcp_config.launch(CALENDAR, tmp_path)
    assert launch.args[-3:] == ("shoal", "mcp", "calendar")
    assert launch.env["SHOAL_WORKSPACE"] == str(tmp_path)
    claude = mcp_config.claude_config([CALENDAR], tmp_path)["mcpServers"]["calendar"]
    assert claude["type"] == "stdio"
    assert claude["args"][-2:] == ["mcp", "calendar"]
    remote = McpServer(name="remote", url="https://mcp.example/mcp")
    assert mcp_config.gemini_settings([remote], tmp_path) == {
        "remote": {"httpUrl": "https://mcp.example/mcp", "trust": True}}
    codex = mcp_config.codex_overrides([CALENDAR, remote], tmp_path)
    assert codex[1] == 'mcp_servers.calendar.default_tools_approval_mode="approve"'
    assert codex[3] == "mcp_servers.calendar.required=true"  # waited for, never left out
    assert codex[5].startswith("mcp_servers.calendar.command=")
    assert json.loads(codex[7].split("=", 1)[1])[-2:] == ["mcp", "calendar"]
    assert codex[-1] == 'mcp_servers.remote.url="https://mcp.example/mcp"'


def test_claude_code_asks_the_mcp_rule_for_its_mcp_tools(tmp_path: Path) -> None:
    target, decision = claude_decide(PermissionPolicy(mcp="deny"), tmp_path,
                                     "mcp__calendar__add_calendar_event", {})
    assert (target, decision.allowed) == ("calendar", False)
    assert "MCP server calendar (add_calendar_event)" in decision.reason
    assert claude_decide(PermissionPolicy(), tmp_path, "mcp__calendar__x", {})[1].allowed
