"""A workflow document's `quality: true` step goes through Shoal's quality loop as a `dag`
subtask does — evaluated by the real evaluator, judged by a model, maybe reviewed — and the
steps after it wait until it is accepted; a low score opens a checkpoint a person decides."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from shoal.api.server import RunningServer, running_server
from shoal.config import Settings
from shoal.demo.model import running_demo_model
from shoal.tools.agent_loop import OpenAICompatTool
from shoal.tools.echo import EchoTool
from shoal.tools.evaluator import EvaluatorTool
from tests.runtime.harness import echo_worker, login, wait_for_status

pytestmark = pytest.mark.timeout(120)

CHECKED = """\
name: checked
version: 1
description: Notes under the quality loop, then a summary.
roles:
  writer: {prompt: "Write notes.md: notes about {query}", tools: [openai_compat]}
  editor: {prompt: "Write summary.md: a summary of {notes}", tools: [openai_compat]}
steps:
  - {id: notes, kind: agent, role: writer, quality: true}
  - {id: summary, kind: agent, role: editor, after: [notes]}
"""


@pytest.fixture
async def plane(settings: Settings) -> AsyncIterator[tuple[RunningServer, httpx.AsyncClient]]:
    folder = settings.data_dir / "workflows"
    folder.mkdir(parents=True)
    (folder / "checked.yaml").write_text(CHECKED)
    async with running_demo_model() as url, running_server(settings) as srv:
        tools = {"openai_compat": OpenAICompatTool(base_url=url, api_key="sk-test",
                                                   model="shoal-demo"),
                 "evaluator": EvaluatorTool(), "echo": EchoTool()}
        async with echo_worker(srv, settings, tools=tools):
            client = await login(srv, settings)
            try:
                yield srv, client
            finally:
                await client.aclose()


async def _run(client: httpx.AsyncClient, query: str) -> str:
    resp = await client.post("/api/v1/tasks", json={"description": query,
                                                    "workflow": "checked"})
    assert resp.status_code == 201, resp.text
    return str(resp.json()["task_id"])


def _kinds(detail: dict[str, Any]) -> list[str]:
    return sorted(s["kind"] for s in detail["subtasks"])


async def test_a_quality_step_is_evaluated_and_judged_before_the_next_runs(
    plane: tuple[RunningServer, httpx.AsyncClient],
) -> None:
    _, client = plane
    task_id = await _run(client, "city cats")
    detail = await wait_for_status(client, task_id, "completed", "failed", within=60)
    assert detail["status"] == "completed", detail
    subs = {s["key"]: s for s in detail["subtasks"]}
    assert {"evaluate", "judge"} <= set(_kinds(detail))
    assert subs["notes#1"]["evaluation"]["overall"] is not None  # judged, like a dag subtask
    judged = [s for s in detail["subtasks"] if s["kind"] == "judge"]
    assert all(j["completed_at"] <= subs["summary#1"]["started_at"] for j in judged)
    assert _kinds(detail).count("agent") == 2  # summary had no quality step
    assert detail["evaluation_scores"] is not None  # the task's mean scores, as in dag


async def test_a_low_score_opens_a_checkpoint_and_approving_goes_on(
    plane: tuple[RunningServer, httpx.AsyncClient],
) -> None:
    _, client = plane
    task_id = await _run(client, "city cats [demo:score=3]")
    await wait_for_status(client, task_id, "checkpoint_pending", within=60)
    page = (await client.get("/api/v1/checkpoints", params={
        "task_id": task_id, "status": "pending_review"})).json()
    [cp] = page["checkpoints"]
    assert cp["reason"] == "low_score"
    wrong = await client.post(f"/api/v1/checkpoints/{cp['checkpoint_id']}/answer",
                              json={"answer": "yes"})
    assert (wrong.status_code, wrong.json()["error"]) == (409, "wrong_decision")
    approved = await client.post(f"/api/v1/checkpoints/{cp['checkpoint_id']}/approve")
    assert approved.status_code == 200, approved.text
    detail = await wait_for_status(client, task_id, "completed", "failed", within=60)
    assert detail["status"] == "completed", detail
    assert "summary#1" in {s["key"] for s in detail["subtasks"]}
