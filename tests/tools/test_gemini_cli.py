"""The `gemini_cli` tool: the real Gemini CLI against the fake model server, in a real workspace."""

from __future__ import annotations

import ast
import asyncio
import itertools
import tomllib
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest
from starlette.applications import Starlette

from shoal.config import Settings
from shoal.demo.fake.exchange import RecordedRequest, request_log
from shoal.tools.base import ToolRun
from shoal.tools.gemini_cli import GeminiCliTool, command_line, create, policy_toml, probe
from shoal.tools.permissions import PermissionPolicy
from tests.conftest import make_settings, require_cli

KEY = "test-key"
MAIN_TURN = "/v1beta/models/gemini-2.5-pro:streamGenerateContent"


def cli_settings(tmp_path: Path, root: str, **overrides: Any) -> Settings:
    values: dict[str, Any] = {"gemini_binary": require_cli("gemini"), "gemini_base_url": root,
                              "gemini_api_key": KEY, "model_max_retries": 0}
    values.update(overrides)
    return make_settings(tmp_path, **values)


def make_tool(tmp_path: Path, root: str) -> GeminiCliTool:
    settings = cli_settings(tmp_path, root)
    return GeminiCliTool(binary=settings.gemini_binary, settings=settings)


def make_run(workspace: Path, instructions: str, *, log: Callable[[str], None],
             timeout: float = 90, **options: Any) -> ToolRun:
    workspace.mkdir(parents=True, exist_ok=True)
    return ToolRun(attempt_id=uuid.uuid4(), task_id=uuid.uuid4(), subtask_id=uuid.uuid4(),
                   role="coder", name="step", instructions=instructions, workspace=workspace,
                   timeout=timeout, log=log, options=options)


def offered_tools(recorded: RecordedRequest) -> set[str]:
    return {d["name"] for t in recorded.body.get("tools", [])
            for d in t.get("functionDeclarations", [])}


def processes_in(workspace: Path) -> list[psutil.Process]:
    """Processes still running with `workspace` as their working directory."""
    found = []
    for process in psutil.process_iter():
        try:
            if process.cwd() == str(workspace) and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
        except psutil.Error:
            continue
    return found


def test_approval_mode_follows_edits_and_is_never_yolo() -> None:
    """Edits allowed → auto_edit, otherwise default; no permission mix starts yolo."""
    for edits, commands in itertools.product(("allow", "deny", "ask"), repeat=2):
        argv = command_line("gemini", "prompt", model="m",
                            policy=PermissionPolicy(edits=edits, commands=commands))
        assert argv[argv.index("--approval-mode") + 1] == (
            "auto_edit" if edits == "allow" else "default")
        assert not {"yolo", "--yolo", "-y"} & set(argv)


def test_policy_file_allows_or_denies_the_shell_and_edits() -> None:
    """The policy file is valid TOML: the default allows the shell; "ask" denies, saying why."""
    default = tomllib.loads(policy_toml(PermissionPolicy()))["rule"]
    assert default == [{"toolName": "run_shell_command", "decision": "allow", "priority": 900,
                        "allowRedirection": True}]
    strict = tomllib.loads(policy_toml(PermissionPolicy(edits="ask", commands="deny")))["rule"]
    assert [(r["toolName"], r["decision"]) for r in strict] == [
        ("run_shell_command", "deny"), (["write_file", "replace"], "deny")]
    assert strict[0]["denyMessage"] == "The task's permission policy denies running shell commands."
    assert "ask a person" in strict[1]["denyMessage"]


async def test_writes_the_file_with_two_model_calls_and_no_router(
        app: Starlette, root: str, tmp_path: Path) -> None:
    """"Write hello.py" succeeds: the CLI writes the file, usage is counted, no side calls."""
    logs: list[str] = []
    workspace = tmp_path / "ws"
    outcome = await make_tool(tmp_path, root).run(
        make_run(workspace, "Write hello.py: print hello", log=logs.append))
    assert outcome.status == "succeeded", outcome.error
    ast.parse((workspace / "hello.py").read_text(encoding="utf-8"))
    assert [p.name for p in workspace.iterdir()] == ["hello.py"]  # no CLI state in results
    assert outcome.output.startswith("[demo model] Wrote hello.py (")
    assert outcome.usage.input_tokens > 0
    assert outcome.usage.output_tokens > 0
    assert f"write_file {workspace}/hello.py" in logs
    assert "write_file ok" in logs
    requests = request_log(app)
    assert [(r.method, r.path, r.query) for r in requests] == [("POST", MAIN_TURN, "alt=sse")] * 2
    assert all(r.headers["x-goog-api-key"] == KEY for r in requests)
    assert not any("responseJsonSchema" in str(r.body.get("generationConfig")) for r in requests)
    assert "run_shell_command" in offered_tools(requests[0])


async def test_shell_commands_run_through_a_policy_rule_not_yolo(
        app: Starlette, root: str, tmp_path: Path) -> None:
    """A test file is compiled with run_shell_command, allowed by the policy file in auto_edit."""
    logs: list[str] = []
    outcome = await make_tool(tmp_path, root).run(
        make_run(tmp_path / "ws", "Write test_hello.py: tests for hello", log=logs.append))
    assert outcome.status == "succeeded", outcome.error
    assert "Checked that it compiles: Output: test_hello.py compiles" in outcome.output
    assert any(line.startswith("run_shell_command python3 -c") for line in logs)
    assert "run_shell_command ok: test_hello.py compiles" in "\n".join(logs)


async def test_denied_edits_and_commands_are_not_offered(
        app: Starlette, root: str, tmp_path: Path) -> None:
    """With edits and commands denied, the model is offered neither, and no file appears."""
    workspace = tmp_path / "ws"
    outcome = await make_tool(tmp_path, root).run(make_run(
        workspace, "Write hello.py: print hello", log=lambda _: None,
        permissions={"edits": "deny", "commands": "deny"}))
    assert outcome.status == "succeeded", outcome.error
    offered = offered_tools(request_log(app)[0])
    assert offered.isdisjoint({"write_file", "replace", "run_shell_command"})
    assert "read_file" in offered
    assert not (workspace / "hello.py").exists()


async def test_writes_outside_the_workspace_are_reported_as_denials(
        root: str, tmp_path: Path) -> None:
    """`[demo:escape]`: the CLI refuses both paths; the log and the output name the denials."""
    logs: list[str] = []
    outcome = await make_tool(tmp_path, root).run(
        make_run(tmp_path / "ws", "Do it [demo:escape]", log=logs.append))
    assert outcome.status == "succeeded", outcome.error
    assert not (tmp_path / "escape.txt").exists()
    assert any(line.startswith("denied: write_file ") for line in logs)
    assert any(line.startswith("denied: read_file /etc/passwd") for line in logs)
    assert "Permission denials:\n- write_file" in outcome.output


async def test_scripted_failure_fails_with_the_api_message(root: str, tmp_path: Path) -> None:
    """`[demo:fail]` (HTTP 500, one attempt allowed) ends as failed, saying what happened."""
    logs: list[str] = []
    outcome = await make_tool(tmp_path, root).run(
        make_run(tmp_path / "ws", "Write hello.py [demo:fail]", log=logs.append))
    assert outcome.status == "failed"
    assert outcome.error is not None
    assert outcome.error.startswith("The Gemini CLI failed (exit code ")
    assert "Scripted failure" in outcome.error
    assert "(HTTP 500 INTERNAL)" in outcome.error
    assert any(line.startswith("gemini: failed: ") for line in logs)


async def test_time_out_raises_and_leaves_no_process(
        app: Starlette, root: str, tmp_path: Path) -> None:
    """A stalled stream past the time limit raises TimeoutError; no process of the run is left."""
    workspace = tmp_path / "ws"
    run = make_run(workspace, "Write hello.py [demo:stall]", log=lambda _: None, timeout=10)
    with pytest.raises(TimeoutError, match="did not finish within 10 seconds"):
        await make_tool(tmp_path, root).run(run)
    assert [r.path for r in request_log(app)] == [MAIN_TURN]
    assert processes_in(workspace) == []


async def test_cancellation_propagates_after_the_process_tree_is_gone(
        root: str, tmp_path: Path) -> None:
    """Cancelling a run mid-request re-raises CancelledError once every process has ended."""
    workspace = tmp_path / "ws"
    started = asyncio.Event()

    def log(line: str) -> None:
        if line.startswith("gemini: session "):
            started.set()

    task = asyncio.create_task(make_tool(tmp_path, root).run(
        make_run(workspace, "Write hello.py [demo:stall]", log=log)))
    await started.wait()
    assert processes_in(workspace) != []
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert processes_in(workspace) == []


async def test_probe_finds_the_cli_and_its_version(tmp_path: Path) -> None:
    """With the CLI and a key, the probe is available and reports the version."""
    settings = cli_settings(tmp_path, "http://127.0.0.1:1")
    found = await probe(settings)
    assert found.available, found.detail
    assert found.version is not None
    assert found.version.startswith("0.")
    assert found.detail.startswith(settings.gemini_binary)
    tool = create(settings, found)
    assert (tool.name, tool.local, tool.version) == ("gemini_cli", False, found.version)


async def test_probe_explains_a_missing_key(tmp_path: Path) -> None:
    """Without a key or a base URL, the probe says so and how to set one."""
    found = await probe(cli_settings(tmp_path, "", gemini_base_url=None, gemini_api_key=None))
    assert not found.available
    assert "no Gemini API key" in found.detail
    assert "GEMINI_API_KEY" in found.enable


async def test_probe_explains_a_missing_binary(tmp_path: Path) -> None:
    """A binary that is not there is reported with how to install it."""
    found = await probe(make_settings(tmp_path, gemini_binary=str(tmp_path / "no-gemini")))
    assert not found.available
    assert "was not found" in found.detail
    assert "@google/gemini-cli" in found.enable
