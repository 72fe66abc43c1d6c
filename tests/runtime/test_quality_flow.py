"""The quality loop end to end: real control plane, real workers over WebSockets, the demo
model over HTTP, and the real evaluator tool (ruff, radon, bandit, pytest)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette

from shoal.api.server import RunningServer, running_server
from shoal.config import Settings
from shoal.demo.model import create_demo_model_app, recorded_requests, running_demo_model
from shoal.tools.agent_loop import OpenAICompatTool
from shoal.tools.base import Tool
from shoal.tools.echo import EchoTool
from shoal.tools.evaluator import EvaluatorTool
from shoal.worker.agent import Worker
from tests.runtime.harness import (
    by_name,
    echo_worker,
    login,
    subtask_detail,
    task_detail,
    wait_for_status,
)

pytestmark = pytest.mark.timeout(120)
WITHIN = 60.0


@pytest.fixture
def model_app() -> Starlette:
    return create_demo_model_app()


@pytest.fixture
async def model_url(model_app: Starlette) -> AsyncIterator[str]:
    async with running_demo_model(model_app) as url:
        yield url


def _tools(url: str) -> dict[str, Tool]:
    return {"openai_compat": OpenAICompatTool(base_url=url, api_key="sk-test", model="shoal-demo"),
            "evaluator": EvaluatorTool(), "echo": EchoTool()}


@contextlib.asynccontextmanager
async def _workers(server: RunningServer, settings: Settings, url: str, *names: str,
                   slots: int = 2) -> AsyncIterator[list[Worker]]:
    async with contextlib.AsyncExitStack() as stack:
        workers = [await stack.enter_async_context(
            echo_worker(server, settings, name=name, tools=_tools(url), slots=slots))
            for name in names]
        yield workers


async def _submit(client: httpx.AsyncClient, plan: list[dict[str, Any]], **extra: Any) -> str:
    resp = await client.post("/api/v1/tasks", json={"description": "Build it", "plan": plan,
                                                    **extra})
    assert resp.status_code == 201, resp.text
    return str(resp.json()["task_id"])


def _step(name: str, description: str, *, complexity: int = 2,
          deps: list[int] | None = None) -> dict[str, Any]:
    return {"name": name, "description": description, "tool": "openai_compat",
            "complexity": complexity, "dependencies": deps or []}


async def _pending(client: httpx.AsyncClient, task_id: str) -> list[dict[str, Any]]:
    resp = await client.get("/api/v1/checkpoints",
                            params={"task_id": task_id, "status": "pending_review"})
    assert resp.status_code == 200, resp.text
    return list(resp.json()["checkpoints"])


async def _wait_checkpoint(client: httpx.AsyncClient, task_id: str) -> dict[str, Any]:
    await wait_for_status(client, task_id, "checkpoint_pending", within=WITHIN)
    [cp] = await _pending(client, task_id)
    return cp


@pytest.fixture
async def server(settings: Settings) -> AsyncIterator[RunningServer]:
    async with running_server(settings) as srv:
        yield srv


async def test_low_score_checkpoint_then_approve_completes(
    server: RunningServer, settings: Settings, model_url: str
) -> None:
    client = await login(server, settings)
    async with _workers(server, settings, model_url, "wa"):
        task_id = await _submit(client, [_step("calc", "Write calc.py: add numbers "
                                               "[demo:score=3]")],
                                checkpoint_frequency="low")
        cp = await _wait_checkpoint(client, task_id)
        assert cp["reason"] == "low_score"
        assert cp["overall_score"] < 7
        assert cp["evaluation_scores"]["completeness"] == 3.0
        detail = await task_detail(client, task_id)
        assert by_name(detail)["calc"]["status"] == "verifying"
        resp = await client.post(f"/api/v1/checkpoints/{cp['checkpoint_id']}/approve")
        assert resp.status_code == 200, resp.text
        assert resp.json()["status"] == "approved"
        detail = await wait_for_status(client, task_id, "completed", within=WITHIN)
        assert detail["evaluation_scores"]["completeness"] == 3.0
        again = await client.post(f"/api/v1/checkpoints/{cp['checkpoint_id']}/approve")
        assert again.status_code == 409
        assert again.json()["error"] == "checkpoint_decided"
        shown = (await client.get(f"/api/v1/checkpoints/{cp['checkpoint_id']}")).json()
        assert shown["decision"] == "approve"
        assert shown["decided_by"] is not None
    other = await login(server, settings, "mallory")
    resp = await other.get(f"/api/v1/checkpoints/{cp['checkpoint_id']}")
    assert resp.status_code == 404
    resp = await other.post(f"/api/v1/checkpoints/{cp['checkpoint_id']}/approve")
    assert resp.status_code == 404
    await other.aclose()
    await client.aclose()


async def test_reject_cancels_and_nothing_runs_afterwards(
    server: RunningServer, settings: Settings, model_url: str
) -> None:
    client = await login(server, settings)
    async with _workers(server, settings, model_url, "wa"):
        plan = [_step("first", "Write one.py: a start [demo:score=2]"),
                _step("second", "Write two.py: more", deps=[0])]
        task_id = await _submit(client, plan, checkpoint_frequency="low")
        cp = await _wait_checkpoint(client, task_id)
        resp = await client.post(f"/api/v1/checkpoints/{cp['checkpoint_id']}/reject",
                                 json={"reason": "Wrong approach."})
        assert resp.status_code == 200, resp.text
        detail = await wait_for_status(client, task_id, "cancelled", within=WITHIN)
        assert "Wrong approach." in detail["error"]
        second = by_name(detail)["second"]
        assert second["status"] == "cancelled"
        assert (await subtask_detail(client, second["subtask_id"]))["attempt_history"] == []
        late = await client.post(f"/api/v1/checkpoints/{cp['checkpoint_id']}/approve")
        assert late.status_code == 409
    await client.aclose()


async def test_correct_reruns_with_the_guidance_in_the_request(
    server: RunningServer, settings: Settings, model_app: Starlette, model_url: str
) -> None:
    client = await login(server, settings)
    async with _workers(server, settings, model_url, "wa"):
        task_id = await _submit(client, [_step("calc", "Write calc.py: add [demo:score=3]")],
                                checkpoint_frequency="low")
        cp = await _wait_checkpoint(client, task_id)
        bad = await client.post(f"/api/v1/checkpoints/{cp['checkpoint_id']}/correct",
                                json={"correction_type": "sideways", "guidance": "x"})
        assert bad.status_code == 422
        resp = await client.post(f"/api/v1/checkpoints/{cp['checkpoint_id']}/correct", json={
            "correction_type": "bug", "guidance": "Use Decimal for money amounts.",
            "apply_to_future": True})
        assert resp.status_code == 200, resp.text
        assert resp.json()["status"] == "re_executing"
        fix_id = resp.json()["correction_subtask_id"]
        # the corrected work is evaluated again; still scored 3 by the demo judge
        second = await _wait_checkpoint(client, task_id)
        assert second["checkpoint_id"] != cp["checkpoint_id"]
        fix = await subtask_detail(client, fix_id)
        assert fix["status"] == "completed"
        assert fix["kind"] == "correct"
        sent = [str(m.get("content")) for body in recorded_requests(model_app)
                for m in body["messages"]]
        assert any("Use Decimal for money amounts." in text for text in sent)
        await client.post(f"/api/v1/checkpoints/{second['checkpoint_id']}/approve")
        await wait_for_status(client, task_id, "completed", within=WITHIN)
        # apply_to_future: the next task's subtasks get the guidance too
        later = await _submit(client, [_step("more", "Write more.py: more code")],
                              quality="off")
        await wait_for_status(client, later, "completed", within=WITHIN)
        last = recorded_requests(model_app)[-1]
        assert "Use Decimal for money amounts." in str(last["messages"])
    await client.aclose()


async def test_review_fix_then_approval_on_another_worker(
    server: RunningServer, settings: Settings, model_url: str
) -> None:
    client = await login(server, settings)
    async with _workers(server, settings, model_url, "wa", "wb"):
        task_id = await _submit(client, [_step("api", "Write api.py: an API [demo:review=fix]",
                                               complexity=3)], checkpoint_frequency="low")
        detail = await wait_for_status(client, task_id, "completed", within=WITHIN)
        api = by_name(detail)["api"]
        assert api["review_cycles"] == 2
        assert api["review"]["outcome"] == "approve"
        steps = [s for s in detail["subtasks"] if s["target_id"] == api["subtask_id"]]
        reviews = [s for s in steps if s["kind"] == "review"]
        fixes = [s for s in steps if s["kind"] == "correct"]
        assert len(reviews) == 2
        assert len(fixes) == 1
        author = api["assigned_worker_id"]
        assert all(r["assigned_worker_id"] != author for r in reviews)
        # the fix ran on the author's own worker
        assert fixes[0]["assigned_worker_id"] == (
            await subtask_detail(client, api["subtask_id"]))["attempt_history"][0]["worker_id"]
    await client.aclose()


async def test_review_that_keeps_failing_escalates_after_three_cycles(
    server: RunningServer, settings: Settings, model_url: str
) -> None:
    client = await login(server, settings)
    async with _workers(server, settings, model_url, "wa", "wb"):
        task_id = await _submit(client, [_step("api", "Write api.py: [demo:review=fail]",
                                               complexity=3)], checkpoint_frequency="low")
        cp = await _wait_checkpoint(client, task_id)
        assert cp["reason"] == "max_review_cycles"
        detail = await task_detail(client, task_id)
        api = by_name(detail)["api"]
        assert api["review_cycles"] == 3
        reviews = [s for s in detail["subtasks"]
                   if s["target_id"] == api["subtask_id"] and s["kind"] == "review"]
        assert len(reviews) == 3
        assert all(r["assigned_worker_id"] != api["assigned_worker_id"] for r in reviews)
    await client.aclose()


async def test_waiting_checkpoint_holds_no_worker_slot(
    server: RunningServer, settings: Settings, model_url: str
) -> None:
    client = await login(server, settings)
    async with _workers(server, settings, model_url, "wa", slots=1):
        paused = await _submit(client, [_step("calc", "Write calc.py: add [demo:score=3]")],
                               checkpoint_frequency="low")
        await _wait_checkpoint(client, paused)
        other = await _submit(client, [{"name": "echo", "description": "hi", "tool": "echo"}])
        await wait_for_status(client, other, "completed", within=WITHIN)
        assert (await task_detail(client, paused))["status"] == "checkpoint_pending"
    await client.aclose()


async def test_evaluators_find_real_problems(
    server: RunningServer, settings: Settings, model_url: str
) -> None:
    client = await login(server, settings)
    async with _workers(server, settings, model_url, "wa"):
        plan = [_step("calc", "Write calc.py: calculator [demo:messy]"),
                _step("tests", "Write test_calc.py: tests for calc.py [demo:messy]", deps=[0])]
        task_id = await _submit(client, plan, checkpoint_frequency="low")
        async with asyncio.timeout(WITHIN), client.stream(
                "GET", f"/api/v1/tasks/{task_id}/events") as stream:
            async for line in stream.aiter_lines():
                if not line.startswith("data: "):
                    continue
                event = json.loads(line[6:])
                if event["type"] == "checkpoint_ready":  # the messy code scores low
                    cid = event["data"]["checkpoint_id"]
                    resp = await client.post(f"/api/v1/checkpoints/{cid}/approve")
                    assert resp.status_code == 200, resp.text
                if event["type"] == "evaluation" and event["data"]["name"] == "tests":
                    break
        detail = await task_detail(client, task_id)
        calc = by_name(detail)["calc"]["evaluation"]
        quality_issues = calc["dimensions"]["code_quality"]["issues"]
        assert {"F401"} <= {i.get("code") for i in quality_issues}
        security = calc["dimensions"]["security"]
        assert {"B602", "B307"} <= {i.get("code") for i in security["issues"]}
        assert security["score"] < 10
        tests = by_name(detail)["tests"]["evaluation"]["dimensions"]["testability"]
        assert tests["score"] <= 5
        assert any("test_add" in i["message"] for i in tests["issues"])
    await client.aclose()


async def test_checkpoint_survives_a_control_plane_restart(
    settings: Settings, model_url: str
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    async with running_server(settings, port=port) as first:
        client = await login(first, settings)
        async with _workers(first, settings, model_url, "wa"):
            task_id = await _submit(client, [_step("calc", "Write calc.py: add "
                                                   "[demo:score=3]")],
                                    checkpoint_frequency="low")
            cp = await _wait_checkpoint(client, task_id)
        token = client.headers["Authorization"]
        await client.aclose()
    async with running_server(settings, port=port) as second, httpx.AsyncClient(
            base_url=second.url, headers={"Authorization": token}, timeout=30) as client:
        assert (await task_detail(client, task_id))["status"] == "checkpoint_pending"
        async with _workers(second, settings, model_url, "wb"):
            resp = await client.post(f"/api/v1/checkpoints/{cp['checkpoint_id']}/approve")
            assert resp.status_code == 200, resp.text
            await wait_for_status(client, task_id, "completed", within=WITHIN)


async def test_tool_approval_request_becomes_a_checkpoint(
    server: RunningServer, settings: Settings, model_url: str
) -> None:
    """A command the policy says to ask about pauses the task; approving re-runs it allowed."""
    client = await login(server, settings)
    async with _workers(server, settings, model_url, "wa"):
        task_id = await _submit(
            client, [_step("tests", "Write test_calc.py: tests for calc.py.")],
            permissions={"commands": "ask"}, quality="off")
        cp = await _wait_checkpoint(client, task_id)
        assert cp["reason"] == "approval_request"
        assert "run_command" in cp["message"]
        resp = await client.post(f"/api/v1/checkpoints/{cp['checkpoint_id']}/approve")
        assert resp.status_code == 200, resp.text
        detail = await wait_for_status(client, task_id, "completed", within=WITHIN)
        tests = by_name(detail)["tests"]
        fix = next(s for s in detail["subtasks"]
                   if s["kind"] == "correct" and s["target_id"] == tests["subtask_id"])
        output = (await subtask_detail(client, fix["subtask_id"]))["output"]
        assert "Permission denials" not in output["text"]
        assert "compiles" in output["text"]  # the approved command really ran
    await client.aclose()


async def test_deadline_decides_and_every_decision_is_audited(
    server: RunningServer, settings: Settings, model_url: str
) -> None:
    """A checkpoint whose deadline passes is approved by the sweeper; the audit says so."""
    client = await login(server, settings)
    async with _workers(server, settings, model_url, "wa"):
        task_id = await _submit(client, [_step("calc", "Write calc.py: add [demo:score=3]")],
                                checkpoint_frequency="low",
                                checkpoint_deadline={"seconds": 0.5, "action": "approve"})
        await wait_for_status(client, task_id, "completed", within=WITHIN)
        [cp] = (await client.get("/api/v1/checkpoints", params={"task_id": task_id})).json()[
            "checkpoints"]
        shown = (await client.get(f"/api/v1/checkpoints/{cp['checkpoint_id']}")).json()
        assert shown["decision"] == "approve"
        assert shown["decided_by"] is None  # nobody: the deadline
        assert [a["action"] for a in shown["audit"]] == ["checkpoint_opened",
                                                         "checkpoint_approve"]
        bad = await client.post("/api/v1/tasks", json={
            "description": "x", "checkpoint_deadline": {"seconds": 10, "action": "explode"}})
        assert bad.status_code == 422
    await client.aclose()
