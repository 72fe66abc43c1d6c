"""The runtime through the real app and a real worker: retries, cancellation, restarts, planning."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from shoal.api.server import RunningServer, running_server
from shoal.config import Settings
from shoal.worker.connection import Backoff
from tests.conftest import make_settings
from tests.runtime.harness import (
    DEADLINE,
    GatedEcho,
    attempt_statuses,
    by_name,
    echo_worker,
    login,
    sse_events,
    submit,
    subtask_detail,
    task_detail,
    wait_for_status,
    wait_until,
)

LONG = 30.0  # seconds an echo subtask waits when the test means to stop it first


@pytest.fixture
async def server(settings: Settings) -> AsyncIterator[RunningServer]:
    async with running_server(settings) as srv:
        yield srv


async def test_failing_subtask_is_retried_then_fails_the_task(
    server: RunningServer, settings: Settings
) -> None:
    """A subtask that always fails gets max_attempts tries; then the task fails, the rest stop."""
    client = await login(server, settings)
    async with echo_worker(server, settings, slots=2) as worker:
        task_id = await submit(
            client,
            [
                {"name": "bad", "description": "fails", "tool": "echo", "options": {"fail": True}},
                {
                    "name": "slow",
                    "description": "waits",
                    "tool": "echo",
                    "options": {"delay": LONG},
                },
                {
                    "name": "after",
                    "description": "never runs",
                    "tool": "echo",
                    "dependencies": ["slow"],
                },
            ],
        )
        events = await sse_events(client, task_id, until={"task_complete", "task_failed"})
        assert events[-1]["type"] == "task_failed"
        await wait_until(lambda: not worker.running, what="the worker to stop the slow subtask")
        detail = await task_detail(client, task_id)
        subs = by_name(detail)
    await client.aclose()
    assert detail["status"] == "failed"
    assert "bad" in detail["error"]
    assert (subs["bad"]["status"], subs["bad"]["attempts"]) == ("failed", settings.max_attempts)
    assert subs["slow"]["status"] == "cancelled"
    assert subs["after"]["status"] == "cancelled"


async def test_failed_attempts_are_all_recorded(server: RunningServer, settings: Settings) -> None:
    """Each try of a failing subtask is its own failed attempt with a rising fence."""
    client = await login(server, settings)
    async with echo_worker(server, settings):
        task_id = await submit(
            client,
            [{"name": "bad", "description": "fails", "tool": "echo", "options": {"fail": True}}],
        )
        detail = await wait_for_status(client, task_id, "failed")
        history = (await subtask_detail(client, detail["subtasks"][0]["subtask_id"]))[
            "attempt_history"
        ]
    await client.aclose()
    assert [(a["fence"], a["status"]) for a in history] == [
        (n, "failed") for n in range(1, settings.max_attempts + 1)
    ]
    assert all("on purpose" in a["error"] for a in history)


async def test_cancel_stops_the_running_attempt(server: RunningServer, settings: Settings) -> None:
    """Cancelling a running task cancels its subtask and attempt and stops it on the worker."""
    client = await login(server, settings)
    async with echo_worker(server, settings) as worker:
        task_id = await submit(
            client,
            [{"name": "slow", "description": "waits", "tool": "echo", "options": {"delay": LONG}}],
        )
        await wait_until(lambda: worker.running, what="the worker to start the subtask")
        resp = await client.post(f"/api/v1/tasks/{task_id}/cancel")
        assert resp.status_code == 200, resp.text
        assert resp.json()["status"] == "cancelled"
        await wait_until(lambda: not worker.running, what="the worker to cancel the attempt")
        sub = (await task_detail(client, task_id))["subtasks"][0]
        history = (await subtask_detail(client, sub["subtask_id"]))["attempt_history"]
    await client.aclose()
    assert sub["status"] == "cancelled"
    assert [a["status"] for a in history] == ["cancelled"]


async def test_second_cancel_is_a_conflict(server: RunningServer, settings: Settings) -> None:
    """Cancelling a task that is already cancelled answers 409 task_ended."""
    client = await login(server, settings)
    async with echo_worker(server, settings):
        task_id = await submit(
            client,
            [{"name": "slow", "description": "waits", "tool": "echo", "options": {"delay": LONG}}],
        )
        first = await client.post(f"/api/v1/tasks/{task_id}/cancel")
        second = await client.post(f"/api/v1/tasks/{task_id}/cancel")
    await client.aclose()
    assert first.status_code == 200, first.text
    assert second.status_code == 409, second.text
    assert second.json()["error"] == "task_ended"


async def test_restart_resumes_running_subtask_without_rerunning(
    database_url: str, tmp_path: Path
) -> None:
    """A control plane restarted mid-subtask adopts the attempt; every subtask runs exactly once."""
    # A lease longer than a restart under load takes: this test is about resuming, not expiry.
    settings = make_settings(tmp_path, database_url=database_url, lease_seconds=10.0)
    tool = GatedEcho()
    async with contextlib.AsyncExitStack() as stack:
        first = contextlib.AsyncExitStack()
        stack.push_async_callback(first.aclose)
        srv = await first.enter_async_context(running_server(settings))
        client = await login(srv, settings)
        stack.push_async_callback(client.aclose)
        await stack.enter_async_context(
            echo_worker(srv, settings, backoff=Backoff(base=0.05, cap=0.2), tools={"echo": tool})
        )
        task_id = await submit(
            client,
            [
                {
                    "name": "a",
                    "description": "held",
                    "tool": "echo",
                    "options": {"gated": True, "files": {"a.txt": "from a"}},
                },
                {"name": "b", "description": "after a", "tool": "echo", "dependencies": ["a"]},
            ],
        )
        await asyncio.wait_for(tool.started.wait(), DEADLINE)
        await first.aclose()  # the control plane goes away while "a" runs
        second = await stack.enter_async_context(
            running_server(settings, port=urlsplit(srv.url).port or 0)
        )
        await wait_until(lambda: len(second.services.runtime.fleet), what="the worker to reconnect")
        tool.gate.set()
        detail = await wait_for_status(client, task_id, "completed", "failed")
        statuses = await attempt_statuses(client, detail)
    assert detail["status"] == "completed", detail
    assert statuses == [["succeeded"], ["succeeded"]]
    assert tool.runs == 2


async def test_result_finished_during_restart_is_accepted(tmp_path: Path) -> None:
    """A result the worker buffered while the control plane was down is accepted, not re-run."""
    settings = make_settings(tmp_path, lease_seconds=10.0)  # resuming, not expiry (above)
    tool = GatedEcho()
    async with contextlib.AsyncExitStack() as stack:
        first = contextlib.AsyncExitStack()
        stack.push_async_callback(first.aclose)
        srv = await first.enter_async_context(running_server(settings))
        client = await login(srv, settings)
        stack.push_async_callback(client.aclose)
        worker = await stack.enter_async_context(
            echo_worker(srv, settings, backoff=Backoff(base=0.05, cap=0.2), tools={"echo": tool})
        )
        task_id = await submit(
            client,
            [
                {"name": "a", "description": "held", "tool": "echo", "options": {"gated": True}},
                {"name": "b", "description": "after a", "tool": "echo", "dependencies": ["a"]},
            ],
        )
        await asyncio.wait_for(tool.started.wait(), DEADLINE)
        await first.aclose()
        tool.gate.set()  # "a" finishes while no control plane is there to take its result
        await wait_until(lambda: not worker.running, what="subtask a to finish offline")
        await stack.enter_async_context(running_server(settings, port=urlsplit(srv.url).port or 0))
        detail = await wait_for_status(client, task_id, "completed", "failed")
        statuses = await attempt_statuses(client, detail)
    assert detail["status"] == "completed", detail
    assert statuses == [["succeeded"], ["succeeded"]]
    assert tool.runs == 2


async def test_planner_output_that_is_not_json_falls_back_with_a_notice(tmp_path: Path) -> None:
    """Without a model the echo planner's answer is no plan: a fallback plan runs and says why."""
    settings = make_settings(tmp_path, default_tool="echo")
    async with running_server(settings) as srv:
        client = await login(srv, settings)
        async with echo_worker(srv, settings):
            task_id = await submit(client, description="Write a greeting. Then print it twice.")
            events = await sse_events(client, task_id, until={"task_complete", "task_failed"})
            detail = await task_detail(client, task_id)
        await client.aclose()
    assert events[-1]["type"] == "task_complete"
    planner = detail["subtasks"][0]
    assert (planner["role"], planner["assigned_tool"]) == ("planner", "echo")
    notices = [e["data"]["message"] for e in events if e["type"] == "notice"]
    assert any("not valid JSON" in n or "must be a JSON array" in n for n in notices), notices
    sources = [
        e["data"]["plan_source"]
        for e in events
        if e["type"] == "task_update" and "plan_source" in e["data"]
    ]
    assert sources in (["simple"], ["template"])
    assert len(detail["subtasks"]) > 1
    assert {s["status"] for s in detail["subtasks"]} == {"completed"}
