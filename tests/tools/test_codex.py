"""The `codex` adapter driving the real Codex CLI against the fake model server."""

from __future__ import annotations

import ast
import asyncio
import re
import stat
import uuid
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped, unused-ignore]  # stubs: types-psutil
import pytest
from starlette.applications import Starlette

from shoal.config import Settings
from shoal.demo.fake.exchange import request_log
from shoal.tools.base import ToolRun
from shoal.tools.codex import CodexTool, config_toml, create, probe
from tests.conftest import make_settings, require_cli


def codex_settings(tmp_path: Path, root: str, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "codex_binary": require_cli("codex"), "openai_base_url": f"{root}/v1",
        "openai_api_key": "sk-test", "codex_model": "shoal-demo", "model_max_retries": 0}
    return make_settings(tmp_path, **{**values, **overrides})


async def codex_tool(settings: Settings) -> CodexTool:
    found = await probe(settings)
    assert found.available, found.detail
    return create(settings, found)


def make_run(workspace: Path, instructions: str, *, timeout: float = 60,
             log: Any = None, options: dict[str, Any] | None = None) -> ToolRun:
    workspace.mkdir(parents=True, exist_ok=True)
    return ToolRun(attempt_id=uuid.uuid4(), task_id=uuid.uuid4(), subtask_id=uuid.uuid4(),
                   role="coder", name="step", instructions=instructions, workspace=workspace,
                   timeout=timeout, log=log if log is not None else (lambda _: None),
                   options=options or {})


def alive(process: psutil.Process) -> bool:
    try:
        return bool(process.is_running() and process.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:  # it ended while we looked
        return False


def processes_in(workspace: Path) -> list[psutil.Process]:
    """The live processes whose working directory is `workspace`."""
    return [process for process in psutil.process_iter(["cwd"])
            if process.info["cwd"] == str(workspace) and alive(process)]


def gone(processes: list[psutil.Process]) -> bool:
    return not any(alive(p) for p in processes)


class StartWatch:
    """A log sink that notes the run's processes once the CLI has started its turn."""

    def __init__(self, workspace: Path) -> None:
        self.workspace = workspace
        self.lines: list[str] = []
        self.processes: list[psutil.Process] = []
        self.started = asyncio.Event()

    def __call__(self, line: str) -> None:
        self.lines.append(line)
        if line == "codex: turn started":
            self.processes = processes_in(self.workspace)
            self.started.set()


async def test_writes_the_file_through_exec_command(tmp_path: Path, root: str,
                                                    app: Starlette) -> None:
    """The CLI runs the demo model's shell command, which writes hello.py in the workspace."""
    tool = await codex_tool(codex_settings(tmp_path, root))
    lines: list[str] = []
    workspace = tmp_path / "ws"
    outcome = await tool.run(make_run(workspace, "Write hello.py: print hello", log=lines.append))
    assert outcome.status == "succeeded", outcome.error
    assert outcome.output.startswith("[demo model] Wrote hello.py (")
    ast.parse((workspace / "hello.py").read_text(encoding="utf-8"))
    assert outcome.usage.input_tokens > 0
    assert outcome.usage.output_tokens > 0
    assert any(line.startswith("run_command ") and "hello.py" in line for line in lines)
    assert "command exited 0" in lines
    requests = request_log(app)
    assert [r.path for r in requests] == ["/v1/responses", "/v1/responses"]
    assert requests[0].headers["authorization"] == "Bearer sk-test"
    assert requests[0].headers["originator"] == "codex_exec"
    first = requests[0].conversation
    assert first is not None
    assert "exec_command" in {t.name for t in first.tools}


async def test_scripted_failure_fails_with_the_reason(tmp_path: Path, root: str,
                                                      app: Starlette) -> None:
    """A model API that answers HTTP 500 ends the run as failed, saying what Codex reported."""
    tool = await codex_tool(codex_settings(tmp_path, root))
    outcome = await tool.run(make_run(tmp_path / "ws", "Write a.py: x [demo:fail]"))
    assert outcome.status == "failed"
    assert outcome.error is not None
    assert outcome.error.startswith("The Codex CLI failed: ")
    assert "HTTP 500" in outcome.error
    assert len(request_log(app)) == 1  # model_max_retries=0 reached the CLI's provider


async def test_client_error_message_is_passed_on(tmp_path: Path, root: str) -> None:
    """An API error body's message reaches the outcome unwrapped from its JSON."""
    tool = await codex_tool(codex_settings(tmp_path, root))
    outcome = await tool.run(make_run(tmp_path / "ws", "Write a.py: x [demo:status=400]"))
    assert outcome.status == "failed"
    assert outcome.error == ("The Codex CLI failed: [demo model] Scripted HTTP 400 "
                             "([demo:status=400]).")


async def test_time_out_stops_every_process(tmp_path: Path, root: str) -> None:
    """A stalled model runs into the time limit: TimeoutError, and no process of the run left."""
    tool = await codex_tool(codex_settings(tmp_path, root))
    workspace = tmp_path / "ws"
    watch = StartWatch(workspace)
    with pytest.raises(TimeoutError):
        await tool.run(make_run(workspace, "Write a.py: x [demo:stall]", timeout=3, log=watch))
    assert watch.processes, "the CLI's processes were not seen while it ran"
    assert gone(watch.processes)
    assert processes_in(workspace) == []


async def test_cancellation_stops_every_process(tmp_path: Path, root: str) -> None:
    """Cancelling a run propagates, after the CLI and its children are gone."""
    tool = await codex_tool(codex_settings(tmp_path, root))
    workspace = tmp_path / "ws"
    watch = StartWatch(workspace)
    task = asyncio.create_task(tool.run(make_run(workspace, "Write a.py: x [demo:stall]",
                                                 log=watch)))
    started = asyncio.create_task(watch.started.wait())
    await asyncio.wait([task, started], return_when=asyncio.FIRST_COMPLETED)
    assert not task.done(), task.result()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert watch.processes
    assert gone(watch.processes)
    assert processes_in(workspace) == []


async def test_denied_edits_run_in_a_read_only_sandbox(tmp_path: Path, root: str) -> None:
    """With edits denied the CLI's sandbox is read-only, so the command cannot write."""
    tool = await codex_tool(codex_settings(tmp_path, root))
    workspace = tmp_path / "ws"
    outcome = await tool.run(make_run(workspace, "Write hello.py: print hello",
                                      options={"permissions": {"edits": "deny"}}))
    assert outcome.status == "succeeded", outcome.error
    assert not (workspace / "hello.py").exists()


async def test_denied_commands_remove_the_shell(tmp_path: Path, root: str,
                                                app: Starlette) -> None:
    """With commands denied the model is offered no shell tool at all."""
    tool = await codex_tool(codex_settings(tmp_path, root))
    workspace = tmp_path / "ws"
    await tool.run(make_run(workspace, "Write hello.py: print hello",
                            options={"permissions": {"commands": "ask"}}))
    first = request_log(app)[0].conversation
    assert first is not None
    assert first.tools
    assert "exec_command" not in {t.name for t in first.tools}
    assert not (workspace / "hello.py").exists()


async def test_exit_without_a_turn_is_a_failure(tmp_path: Path) -> None:
    """A CLI that exits without `turn.completed` ends the run as failed, with its stderr."""
    script = tmp_path / "codex"
    script.write_text("#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'codex-cli 9.9.9'; "
                      "exit 0; fi\necho 'something broke' >&2\nexit 3\n", encoding="utf-8")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    settings = make_settings(tmp_path, codex_binary=str(script), openai_api_key="sk-test",
                             openai_base_url="http://127.0.0.1:9/v1")
    outcome = await (await codex_tool(settings)).run(make_run(tmp_path / "ws", "Do it"))
    assert outcome.status == "failed"
    assert outcome.error == ("The Codex CLI failed: codex exited without finishing its turn, "
                             "with code 3\n--- stderr ---\nsomething broke")


async def test_probe_finds_the_cli_and_its_version(tmp_path: Path) -> None:
    """The probe finds the installed CLI, reads its version and sees the key."""
    settings = make_settings(tmp_path, codex_binary=require_cli("codex"),
                             openai_api_key="sk-test", openai_base_url=None)
    found = await probe(settings)
    assert found.available
    assert re.fullmatch(r"\d+\.\d+\.\d+\S*", found.version or "")
    assert not found.local
    assert "the OpenAI API" in found.detail
    assert create(settings, found).version == found.version


async def test_probe_explains_a_missing_key(tmp_path: Path) -> None:
    """Without a key or a base URL the CLI is not offered, and the probe says how to fix it."""
    settings = make_settings(tmp_path, codex_binary=require_cli("codex"),
                             openai_api_key=None, openai_base_url=None)
    found = await probe(settings)
    assert not found.available
    assert found.version is not None
    assert "no OpenAI API key" in found.detail
    assert "OPENAI_API_KEY" in found.enable


async def test_probe_explains_a_missing_binary(tmp_path: Path) -> None:
    """A CLI that is not installed is reported with how to install it."""
    settings = make_settings(tmp_path, codex_binary="codex-not-installed-here",
                             tool_path=str(tmp_path), openai_api_key="sk-test")
    found = await probe(settings)
    assert not found.available
    assert "'codex-not-installed-here' was not found" in found.detail
    assert "npm install" in found.enable


def test_config_names_the_custom_provider(tmp_path: Path) -> None:
    """With a base URL the config adds a Responses provider whose key comes from the env."""
    settings = make_settings(tmp_path, openai_base_url='http://127.0.0.1:1/v1/',
                             codex_model='odd "name"', model_max_retries=2)
    text = config_toml(settings)
    assert 'model = "odd \\"name\\""' in text
    assert 'approval_policy = "never"' in text
    assert 'model_provider = "shoal"' in text
    assert 'base_url = "http://127.0.0.1:1/v1"' in text
    assert 'env_key = "SHOAL_CODEX_API_KEY"' in text
    assert 'wire_api = "responses"' in text
    assert "request_max_retries = 2" in text
    assert "sk-" not in text
    plain = config_toml(make_settings(tmp_path, openai_base_url=None))
    assert "model_provider" not in plain
