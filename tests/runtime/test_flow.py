"""A task runs end to end through the real runtime, API and a worker over WebSockets."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from shoal.api.server import RunningServer, running_server
from shoal.config import Settings
from shoal.tools.base import ToolOutcome, ToolRun
from shoal.tools.echo import EchoTool
from tests.runtime.harness import GatedEcho, echo_worker, login, sse_events, submit, task_detail


@pytest.fixture
async def server(settings: Settings) -> AsyncIterator[RunningServer]:
    async with running_server(settings) as srv:
        yield srv


async def test_explicit_plan_runs_to_completion(server: RunningServer, settings: Settings) -> None:
    """A user plan of echo subtasks completes, streams its events, and files come back."""
    client = await login(server, settings)
    async with echo_worker(server, settings):
        plan = [{"name": "a", "description": "first", "tool": "echo",
                 "options": {"files": {"a.txt": "hello"}}},
                {"name": "b", "description": "second", "tool": "echo", "dependencies": ["a"]}]
        task_id = await submit(client, plan)
        events = await sse_events(client, task_id, until={"task_complete", "task_failed"})
        assert events[-1]["type"] == "task_complete"
        detail = await task_detail(client, task_id)
        assert detail["status"] == "completed"
        assert [s["status"] for s in detail["subtasks"]] == ["completed", "completed"]
        sub_a = detail["subtasks"][0]["subtask_id"]
        files = (await client.get(f"/api/v1/subtasks/{sub_a}/files")).json()["files"]
        assert [f["path"] for f in files] == ["a.txt"]
    await client.aclose()


async def test_task_permissions_reach_the_agent(server: RunningServer, settings: Settings) -> None:
    """A task's permission policy travels to the worker: a denied command is reported."""
    from shoal.demo.model import running_demo_model
    from shoal.tools.agent_loop import OpenAICompatTool

    client = await login(server, settings)
    async with running_demo_model() as url:
        tool = OpenAICompatTool(base_url=url, api_key="sk-test", model="shoal-demo")
        async with echo_worker(server, settings, tools={"openai_compat": tool}):
            body = {"description": "Tests", "permissions": {"commands": "deny"},
                    "plan": [{"name": "t", "tool": "openai_compat",
                              "description": "Write test_todo.py: tests for todo.py."}]}
            resp = await client.post("/api/v1/tasks", json=body)
            assert resp.status_code == 201, resp.text
            task_id = resp.json()["task_id"]
            events = await sse_events(client, task_id, until={"task_complete", "task_failed"})
            assert events[-1]["type"] == "task_complete"
            detail = await task_detail(client, task_id)
            sub = (await client.get(
                f"/api/v1/subtasks/{detail['subtasks'][0]['subtask_id']}")).json()
    assert "Permission denials:" in str(sub["output"])
    assert "run_command" in str(sub["output"])
    await client.aclose()


class SeeingEcho(EchoTool):
    """The echo tool, noting which files each subtask found in its workspace at the start."""

    def __init__(self) -> None:
        self.seen: dict[str, list[str]] = {}

    async def run(self, run: ToolRun) -> ToolOutcome:
        """Note the workspace's files, then echo."""
        self.seen[run.name] = sorted(
            p.relative_to(run.workspace).as_posix() for p in run.workspace.rglob("*")
            if p.is_file())
        return await super().run(run)


async def test_files_reach_every_descendant(server: RunningServer, settings: Settings) -> None:
    """A file reaches the subtasks after its author, however far down; one without files
    upstream starts in an empty workspace (the dispatcher's shortcut for that case)."""
    client = await login(server, settings)
    tool = SeeingEcho()
    async with echo_worker(server, settings, tools={"echo": tool}):
        plain = await submit(client, [
            {"name": "p1", "description": "first", "tool": "echo"},
            {"name": "p2", "description": "second", "tool": "echo", "dependencies": ["p1"]},
        ])
        events = await sse_events(client, plain, until={"task_complete", "task_failed"})
        assert events[-1]["type"] == "task_complete"
        task_id = await submit(client, [
            {"name": "a", "description": "writes", "tool": "echo",
             "options": {"files": {"a.txt": "hello"}}},
            {"name": "b", "description": "passes on", "tool": "echo", "dependencies": ["a"]},
            {"name": "c", "description": "far below", "tool": "echo", "dependencies": ["b"]},
            {"name": "d", "description": "two parents", "tool": "echo",
             "dependencies": ["b", "c"]},
        ])
        events = await sse_events(client, task_id, until={"task_complete", "task_failed"})
        assert events[-1]["type"] == "task_complete"
    await client.aclose()
    assert tool.seen["p1"] == tool.seen["p2"] == tool.seen["a"] == []
    assert tool.seen["b"] == tool.seen["c"] == tool.seen["d"] == ["a.txt"]


class FailsFirst(EchoTool):
    """Echo whose first run fails, so that the subtask is retried."""

    def __init__(self) -> None:
        self.runs = 0

    async def run(self, run: ToolRun) -> ToolOutcome:
        """Fail the first run; echo after."""
        self.runs += 1
        if self.runs == 1:
            return ToolOutcome(status="failed", error="A flaky failure, on purpose.")
        return await super().run(run)


async def test_subtask_updates_count_attempts(server: RunningServer, settings: Settings) -> None:
    """Each `subtask_update` says how many attempts the subtask has had: a live page shows a
    retry without reading the task again."""
    client = await login(server, settings)
    async with echo_worker(server, settings, tools={"echo": FailsFirst()}):
        task_id = await submit(client, [{"name": "flaky", "description": "d", "tool": "echo"}])
        events = await sse_events(client, task_id, until={"task_complete", "task_failed"})
    updates = [(e["data"]["status"], e["data"]["attempts"], e["data"]["review_cycles"])
               for e in events if e["type"] == "subtask_update"]
    assert updates[-1] == ("completed", 2, 0)
    assert any(a == 1 for _, a, _ in updates)  # said during the first attempt
    await client.aclose()


async def test_live_attempts_are_indexed_by_number_while_they_run(
    server: RunningServer, settings: Settings,
) -> None:
    """The runtime finds a worker's copy of an attempt id by its number (`attempt_ids`): while
    an attempt runs the index holds the runtime's own id object, and its entry goes when the
    attempt ends, so the index does not grow with the attempts ever run."""
    client = await login(server, settings)
    memory = server.services.runtime.memory
    tool = GatedEcho()
    async with echo_worker(server, settings, tools={"echo": tool}):
        plan = [{"name": "first", "description": "go", "tool": "echo"},
                {"name": "held", "description": "wait", "tool": "echo", "dependencies": [0],
                 "options": {"gated": True}}]
        task_id = await submit(client, plan)
        await tool.started.wait()  # the first ended, the second runs
        (aid, tid), = memory.attempt_task.items()
        assert str(tid) == task_id
        assert memory.attempt_ids == {aid.int: aid}
        assert memory.attempt_ids[aid.int] is aid
        tool.gate.set()
        events = await sse_events(client, task_id, until={"task_complete", "task_failed"})
        assert events[-1]["type"] == "task_complete"
    assert memory.attempt_ids == {}
    assert memory.attempt_task == {}
    await client.aclose()
