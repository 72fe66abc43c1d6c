"""Shoal's own agent loop against the demo model, over real HTTP, in a real workspace."""

from __future__ import annotations

import ast
import asyncio
import dataclasses
import json
import socket
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from starlette.applications import Starlette

from shoal.demo.model import create_demo_model_app, recorded_requests, running_demo_model
from shoal.process import run_command
from shoal.protocol import ExecuteTask
from shoal.tools.agent_loop import OpenAICompatTool, is_local_url
from shoal.tools.base import ToolRun
from shoal.tracing import configure


def make_run(workspace: Path, instructions: str, *, role: str = "coder",
             logs: list[str] | None = None) -> ToolRun:
    workspace.mkdir(parents=True, exist_ok=True)
    sink = logs if logs is not None else []
    return ToolRun(attempt_id=uuid.uuid4(), task_id=uuid.uuid4(), subtask_id=uuid.uuid4(),
                   role=role, name="step", instructions=instructions, workspace=workspace,
                   timeout=60, log=sink.append)


def make_tool(base_url: str, **options: Any) -> OpenAICompatTool:
    return OpenAICompatTool(base_url=base_url, api_key="sk-test", model="shoal-demo",
                            **options)


@pytest.fixture
def app() -> Starlette:
    return create_demo_model_app()


@pytest.fixture
async def base_url(app: Starlette) -> AsyncIterator[str]:
    async with running_demo_model(app) as url:
        yield url


async def test_todo_step_writes_valid_python(base_url: str, tmp_path: Path) -> None:
    """The todo storage step writes a todo.py that parses, and summarises what it did."""
    logs: list[str] = []
    workspace = tmp_path / "ws"
    outcome = await make_tool(base_url).run(make_run(
        workspace, "Write todo.py: a TodoList class with add/complete/remove/list.", logs=logs))
    assert outcome.status == "succeeded", outcome.error
    ast.parse((workspace / "todo.py").read_text(encoding="utf-8"))
    assert outcome.output.startswith("[demo model] Wrote todo.py (")
    assert any(line.startswith("write_file todo.py (") for line in logs)
    assert outcome.usage.input_tokens > 0
    assert outcome.usage.output_tokens > 0


async def test_test_step_runs_a_command(base_url: str, tmp_path: Path) -> None:
    """A test-writing step also runs a command in the workspace and reports its result."""
    logs: list[str] = []
    outcome = await make_tool(base_url).run(make_run(
        tmp_path, "Write test_todo.py: pytest tests for todo.py.", logs=logs))
    assert outcome.status == "succeeded", outcome.error
    assert any(line.startswith("run_command python3 -c") for line in logs)
    assert "test_todo.py compiles" in outcome.output


async def test_planner_role_returns_a_json_plan(base_url: str, tmp_path: Path) -> None:
    """With the planner role the final answer is a JSON plan."""
    outcome = await make_tool(base_url).run(make_run(
        tmp_path, "Plan this task.\n\nTask: Build a CLI todo app with tests", role="planner"))
    assert outcome.status == "succeeded", outcome.error
    plan = json.loads(outcome.output)
    assert len(plan) == 4


async def test_whole_todo_plan_builds_a_working_app(base_url: str, tmp_path: Path) -> None:
    """Running every planned step in one workspace yields an app whose tests pass."""
    tool = make_tool(base_url)
    planned = await tool.run(make_run(tmp_path / "plan", "Task: Build a CLI todo app",
                                      role="planner"))
    for step in json.loads(planned.output):
        outcome = await tool.run(make_run(tmp_path / "app", step["description"]))
        assert outcome.status == "succeeded", outcome.error
    result = await run_command([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
                               cwd=tmp_path / "app", timeout=60)
    assert result.exit_code == 0, result.stdout + result.stderr


async def test_server_error_fails_with_a_useful_message(base_url: str, tmp_path: Path) -> None:
    """An HTTP 500 from the model ends the run as failed, naming the server and what to do."""
    outcome = await make_tool(base_url).run(make_run(tmp_path, "Write x.py [demo:fail]"))
    assert outcome.status == "failed"
    assert outcome.error is not None
    assert base_url in outcome.error
    assert "HTTP 500" in outcome.error
    assert "retry" in outcome.error


async def test_unreachable_server_fails_with_a_useful_message(tmp_path: Path) -> None:
    """A server nobody listens on ends the run as failed with advice on starting one."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    outcome = await make_tool(url, max_retries=0).run(make_run(tmp_path, "Write x.md"))
    assert outcome.status == "failed"
    assert outcome.error is not None
    assert f"{url} cannot be reached" in outcome.error
    assert "shoal demo-model" in outcome.error


async def test_paths_outside_the_workspace_are_refused(
    app: Starlette, base_url: str, tmp_path: Path
) -> None:
    """A model asking for ../escape.txt or /etc/passwd gets an error; nothing leaves."""
    logs: list[str] = []
    workspace = tmp_path / "ws"
    outcome = await make_tool(base_url).run(make_run(workspace, "Go [demo:escape]", logs=logs))
    assert outcome.status == "succeeded", outcome.error
    assert not (tmp_path / "escape.txt").exists()
    assert list(workspace.iterdir()) == []
    tool_results = [m["content"] for m in recorded_requests(app)[-1]["messages"]
                    if m["role"] == "tool"]
    assert len(tool_results) == 2
    assert all(result.startswith("Error: the path") for result in tool_results)
    assert "root:" not in outcome.output
    refusals = [line for line in logs if line.startswith(("write_file", "read_file"))]
    assert len(refusals) == 2
    assert all("refused" in line for line in refusals)


async def test_turn_limit_fails_clearly(base_url: str, tmp_path: Path) -> None:
    """A model still calling tools when the turns run out ends as failed, saying why."""
    outcome = await make_tool(base_url, max_turns=1).run(
        make_run(tmp_path, "Write test_todo.py: tests for todo.py."))
    assert outcome.status == "failed"
    assert outcome.error is not None
    assert "after 1 turns" in outcome.error
    assert "SHOAL_AGENT_MAX_TURNS" in outcome.error


async def test_cancellation_propagates(app: Starlette, base_url: str, tmp_path: Path) -> None:
    """Cancelling a run mid-request raises CancelledError out of it."""
    running = asyncio.create_task(
        make_tool(base_url).run(make_run(tmp_path, "Write x.md [demo:slow=30]")))
    deadline = time.monotonic() + 10
    while not recorded_requests(app):
        assert time.monotonic() < deadline, "the request never reached the demo model"
        await asyncio.sleep(0.01)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running


def test_local_is_guessed_from_the_host() -> None:
    """Loopback and private addresses count as local; public host names do not."""
    assert is_local_url("http://127.0.0.1:8765/v1")
    assert is_local_url("http://localhost:11434/v1")
    assert is_local_url("http://192.168.1.20:8000/v1")
    assert not is_local_url("https://api.openai.com/v1")
    assert OpenAICompatTool(base_url="https://api.openai.com/v1", api_key="k",
                            model="m").local is False
    assert OpenAICompatTool(base_url="https://api.openai.com/v1", api_key="k", model="m",
                            local=True).local is True


async def test_list_and_read_files(app: Starlette, base_url: str, tmp_path: Path) -> None:
    """list_files and read_file give the model the workspace's names and contents."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "notes.txt").write_text("remember the milk\n", encoding="utf-8")
    logs: list[str] = []
    outcome = await make_tool(base_url).run(
        make_run(tmp_path, "Read docs/notes.txt [demo:explore]", logs=logs))
    assert outcome.status == "succeeded", outcome.error
    tool_results = [m["content"] for m in recorded_requests(app)[-1]["messages"]
                    if m["role"] == "tool"]
    assert tool_results == ["docs/notes.txt (18 bytes)", "remember the milk\n"]
    assert "list_files ." in logs
    assert "read_file docs/notes.txt (18 bytes)" in logs


async def test_rate_limit_is_retried_after_the_servers_wait(
    app: Starlette, base_url: str, tmp_path: Path
) -> None:
    """Two 429s with Retry-After, then success: the loop waits as asked and finishes."""
    logs: list[str] = []
    started = time.monotonic()
    outcome = await make_tool(base_url, max_retries=3).run(make_run(
        tmp_path, "Write a.md: notes [demo:status=429,retry-after=0.3,times=2]", logs=logs))
    assert outcome.status == "succeeded", outcome.error
    assert time.monotonic() - started >= 0.6  # waited Retry-After twice
    retries = [line for line in logs if line.startswith("model call failed")]
    assert len(retries) == 2
    assert "HTTP 429" in retries[0]
    assert (tmp_path / "a.md").is_file()
    # two refused requests + the write turn + the summary turn
    assert len(recorded_requests(app)) == 4


async def test_retries_run_out_with_a_clear_error(base_url: str, tmp_path: Path) -> None:
    """A server that keeps answering 503 fails the run after the configured retries."""
    logs: list[str] = []
    outcome = await make_tool(base_url, max_retries=1).run(make_run(
        tmp_path, "Write a.md [demo:status=503,retry-after=0]", logs=logs))
    assert outcome.status == "failed"
    assert outcome.error is not None
    assert "HTTP 503" in outcome.error
    assert sum(line.startswith("model call failed") for line in logs) == 1


async def test_journal_replays_calls_of_an_earlier_attempt(
    app: Starlette, base_url: str, tmp_path: Path
) -> None:
    """A second attempt of a subtask replays the model calls the first one paid for."""
    journal = tmp_path / "journal"
    subtask = uuid.uuid4()
    instructions = "Write test_todo.py: tests for todo.py."

    def attempt(workspace: Path, logs: list[str]) -> ToolRun:
        workspace.mkdir()
        return ToolRun(attempt_id=uuid.uuid4(), task_id=uuid.uuid4(), subtask_id=subtask,
                       role="coder", name="tests", instructions=instructions,
                       workspace=workspace, timeout=60, log=logs.append)

    first_logs: list[str] = []
    first = await make_tool(base_url, max_turns=1, journal_dir=journal).run(
        attempt(tmp_path / "one", first_logs))
    assert first.status == "failed"  # ran out of turns after paying for one call
    assert len(recorded_requests(app)) == 1
    second_logs: list[str] = []
    second = await make_tool(base_url, journal_dir=journal).run(
        attempt(tmp_path / "two", second_logs))
    assert second.status == "succeeded", second.error
    assert (tmp_path / "two" / "test_todo.py").is_file()  # the replayed call ran for real
    assert len(recorded_requests(app)) == 3  # the first call was not sent again
    assert any("1 model call(s) replayed" in line for line in second_logs)
    assert second.usage.input_tokens < first.usage.input_tokens + second.usage.input_tokens
    assert not list(journal.iterdir())  # a success discards the journal


async def test_denied_command_is_reported(app: Starlette, base_url: str, tmp_path: Path) -> None:
    """With commands denied, run_command is refused, told to the model and reported."""
    logs: list[str] = []
    run = make_run(tmp_path / "ws", "Write test_todo.py: tests for todo.py.", logs=logs)
    run = dataclasses.replace(run, options={"permissions": {"commands": "deny"}})
    outcome = await make_tool(base_url).run(run)
    assert outcome.status == "succeeded", outcome.error
    assert "Permission denials:" in outcome.output
    assert "run_command" in outcome.output
    tool_results = [m["content"] for m in recorded_requests(app)[-1]["messages"]
                    if m["role"] == "tool"]
    assert tool_results[-1].startswith("Error: permission denied")
    assert any("denied" in line for line in logs)


async def test_bad_permission_options_fail_clearly(base_url: str, tmp_path: Path) -> None:
    """An unknown permission value fails the run with the field named."""
    run = make_run(tmp_path, "Write a.md")
    run = dataclasses.replace(run, options={"permissions": {"commands": "maybe"}})
    outcome = await make_tool(base_url).run(run)
    assert outcome.status == "failed"
    assert outcome.error is not None
    assert "permissions.commands" in outcome.error


async def test_each_model_request_of_a_traced_attempt_is_a_span(
    base_url: str, tmp_path: Path
) -> None:
    """A traced attempt's model requests are spans under it: a refused one with its error,
    the answered ones with their tokens."""
    spans = InMemorySpanExporter()
    tracing = configure("shoal-worker", exporter=spans)
    assert tracing is not None
    run = make_run(tmp_path, "Write a.md: notes [demo:status=429,retry-after=0,times=1]")
    attempt = tracing.attempt(ExecuteTask(
        attempt_id=run.attempt_id, fence=1, task_id=run.task_id, subtask_id=run.subtask_id,
        role=run.role, tool="openai_compat", name=run.name, instructions=run.instructions))
    assert attempt is not None
    outcome = await make_tool(base_url, max_retries=1).run(
        dataclasses.replace(run, trace=attempt))
    assert outcome.status == "succeeded", outcome.error
    await tracing.close()
    refused, *answered = sorted(spans.get_finished_spans(), key=lambda s: s.start_time or 0)
    assert refused.status.status_code is StatusCode.ERROR
    assert refused.attributes is not None
    assert refused.attributes["error.type"] == "ModelError"
    assert answered
    assert all(s.name == "chat shoal-demo" for s in answered)
    assert {s.parent.span_id for s in answered if s.parent} == {attempt.span_id}
    tokens = [(s.attributes or {}).get("gen_ai.usage.input_tokens") for s in answered]
    assert sum(t for t in tokens if isinstance(t, int)) == outcome.usage.input_tokens
    assert attempt.model == "shoal-demo"
