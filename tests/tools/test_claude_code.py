"""The `claude_code` tool: the real Claude Code CLI against the in-process fake model server."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest
from starlette.applications import Starlette

from shoal.config import Settings
from shoal.demo.fake.exchange import request_log
from shoal.tools.base import Probe, ToolRun
from shoal.tools.claude_code import ClaudeCodeTool, create, decide, probe
from shoal.tools.permissions import PermissionPolicy
from tests.conftest import make_settings, require_cli

API_KEY = "sk-ant-test"


@pytest.fixture
def settings(tmp_path: Path, root: str) -> Settings:
    return make_settings(tmp_path, claude_binary=require_cli("claude"),
                         anthropic_api_key=API_KEY, anthropic_base_url=root)


@pytest.fixture
def tool(settings: Settings) -> ClaudeCodeTool:
    return create(settings, Probe("claude_code", True, version="test"))


def make_run(tmp_path: Path, instructions: str, *, logs: list[str] | None = None,
             timeout: float = 60, options: dict[str, Any] | None = None,
             on_log: Callable[[str], None] | None = None) -> ToolRun:
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    sink = logs if logs is not None else []

    def log(line: str) -> None:
        sink.append(line)
        if on_log is not None:
            on_log(line)

    return ToolRun(attempt_id=uuid.uuid4(), task_id=uuid.uuid4(), subtask_id=uuid.uuid4(),
                   role="coder", name="step", instructions=instructions, workspace=workspace,
                   timeout=timeout, log=log, options=options or {})


class ProcessWatch:
    """Collects the descendants this process gains at every log line (not those it had
    before: a helper process an earlier test started is none of the run's); `started` once
    the CLI is up."""

    def __init__(self) -> None:
        self.seen: dict[int, psutil.Process] = {}
        self.started = asyncio.Event()
        self._before = {p.pid for p in psutil.Process().children(recursive=True)}

    def __call__(self, line: str) -> None:
        for process in psutil.Process().children(recursive=True):
            if process.pid not in self._before:
                self.seen.setdefault(process.pid, process)
        if line.startswith("claude_code "):  # the CLI's init event
            self.started.set()

    def survivors(self) -> list[psutil.Process]:
        alive = []
        for process in self.seen.values():
            try:
                if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                    alive.append(process)
            except psutil.NoSuchProcess:
                continue
        return alive


async def test_writes_a_file_and_reports_usage(tool: ClaudeCodeTool, tmp_path: Path,
                                               app: Starlette) -> None:
    """The CLI writes hello.py in the workspace after Shoal approves it, and reports usage."""
    logs: list[str] = []
    outcome = await tool.run(make_run(tmp_path, "Write hello.py: print hello", logs=logs))
    assert outcome.status == "succeeded", outcome.error
    assert outcome.output.startswith("[demo model] Wrote hello.py (")
    assert "demo model" in (tmp_path / "ws" / "hello.py").read_text()
    assert "tool: Write hello.py" in logs
    assert any(line.startswith("usage: ") for line in logs)
    assert outcome.usage.input_tokens > 0
    assert outcome.usage.output_tokens > 0
    assert outcome.usage.cost_usd > 0
    sent = [r for r in request_log(app) if r.api == "anthropic"]
    assert len(sent) == 2  # one per model turn: the Write call, then the summary
    assert sent[0].path == "/v1/messages"
    assert sent[0].query == "beta=true"
    assert sent[0].headers["x-api-key"] == API_KEY
    assert sent[0].headers["user-agent"].startswith("claude-cli/")


async def test_large_file_is_approved_in_one_piece(tool: ClaudeCodeTool, tmp_path: Path) -> None:
    """A permission request far longer than a pipe read (a 240 KB file) is still answered."""
    filler = "lorem ipsum " * 20_000
    outcome = await tool.run(make_run(tmp_path, f"Write notes.md: {filler}"))
    assert outcome.status == "succeeded", outcome.error
    assert filler.strip() in (tmp_path / "ws" / "notes.md").read_text()


async def test_edits_outside_the_workspace_are_denied(tool: ClaudeCodeTool,
                                                      tmp_path: Path) -> None:
    """A write outside the workspace and a read of /etc/passwd are denied and reported."""
    logs: list[str] = []
    outcome = await tool.run(make_run(tmp_path, "Look around. [demo:escape]", logs=logs))
    assert outcome.status == "succeeded", outcome.error
    assert not (tmp_path / "escape.txt").exists()
    assert "Permission denials:" in outcome.output
    assert f"- Write {tmp_path / 'escape.txt'}: " in outcome.output
    assert "- Read /etc/passwd: " in outcome.output
    assert any(line.startswith("Write ") and " denied: " in line for line in logs)
    assert "root:" not in outcome.output


async def test_denied_command_is_reported(tool: ClaudeCodeTool, tmp_path: Path) -> None:
    """With commands denied by the task's policy, the CLI's Bash call is refused and listed."""
    logs: list[str] = []
    outcome = await tool.run(make_run(
        tmp_path, "Write test_thing.py: tests for thing.py", logs=logs,
        options={"permissions": {"commands": "deny"}}))
    assert outcome.status == "succeeded", outcome.error
    assert (tmp_path / "ws" / "test_thing.py").is_file()
    assert "- Bash python3 -c " in outcome.output
    assert "denies running" in outcome.output
    assert any(line.startswith("Bash ") and " denied: " in line for line in logs)


async def test_scripted_failure_fails_with_the_error(tool: ClaudeCodeTool,
                                                     tmp_path: Path) -> None:
    """A model API failure ends the run as failed, with the API's message in the error."""
    outcome = await tool.run(make_run(tmp_path, "Write hello.py: print hello [demo:fail]"))
    assert outcome.status == "failed"
    assert outcome.error is not None
    assert "Scripted failure" in outcome.error
    assert not (tmp_path / "ws" / "hello.py").exists()


async def test_time_out_stops_every_process(tool: ClaudeCodeTool, tmp_path: Path) -> None:
    """A stalled model stream runs into the time-out; no process of the run survives."""
    watch = ProcessWatch()
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        await tool.run(make_run(tmp_path, "Write hello.py: print hello [demo:stall]",
                                timeout=3, on_log=watch))
    assert watch.seen, "the CLI never started"
    assert watch.survivors() == []
    assert time.monotonic() - started < 10  # the protocol interrupt, not the signal ladder


async def test_cancellation_stops_every_process(tool: ClaudeCodeTool, tmp_path: Path) -> None:
    """Cancelling a run waiting on a slow model re-raises after the process tree is gone."""
    watch = ProcessWatch()
    logs: list[str] = []
    task = asyncio.create_task(tool.run(make_run(
        tmp_path, "Write hello.py: print hello [demo:slow=30]", logs=logs, on_log=watch)))
    await asyncio.wait_for(watch.started.wait(), 30)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert watch.seen
    assert watch.survivors() == []
    assert not (tmp_path / "ws" / "hello.py").exists()


async def test_probe_finds_the_cli_and_its_version(settings: Settings) -> None:
    """With the CLI and a key present, the probe is available and names the version."""
    found = await probe(settings)
    assert found.available, found.detail
    assert found.version is not None
    assert found.version.startswith("2.")
    assert settings.claude_binary in found.detail


async def test_probe_says_when_the_key_is_missing(tmp_path: Path) -> None:
    """Without an API key the probe is unavailable and says how to set one."""
    found = await probe(make_settings(tmp_path, claude_binary=require_cli("claude"),
                                      anthropic_api_key=None))
    assert not found.available
    assert found.version is not None
    assert "no Anthropic API key" in found.detail
    assert "ANTHROPIC_API_KEY" in found.enable


async def test_probe_says_when_the_cli_is_missing(tmp_path: Path) -> None:
    """Without the binary the probe is unavailable and says how to install it."""
    found = await probe(make_settings(tmp_path, claude_binary=str(tmp_path / "no-claude"),
                                      anthropic_api_key=API_KEY))
    assert not found.available
    assert "was not found" in found.detail
    assert "npm install -g @anthropic-ai/claude-code" in found.enable


def test_decide_maps_claude_tools_to_the_policy(tmp_path: Path) -> None:
    """Edits, reads and commands go to the policy; questions and unknown tools are denied."""
    policy = PermissionPolicy(commands="ask")
    inside = str(tmp_path / "a.py")
    assert decide(policy, tmp_path, "Edit", {"file_path": inside}) == (
        inside, policy.edit(inside, tmp_path))
    assert not decide(policy, tmp_path, "Write", {"file_path": "/etc/x"})[1].allowed
    assert not decide(policy, tmp_path, "Read", {"file_path": "/etc/passwd"})[1].allowed
    command = decide(policy, tmp_path, "Bash", {"command": "ls"})
    assert command[0] == "ls"
    assert command[1].needs_human
    assert decide(policy, tmp_path, "AskUserQuestion", {})[1].needs_human
    assert not decide(policy, tmp_path, "WebFetch", {"url": "https://x"})[1].allowed
