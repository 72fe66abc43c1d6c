"""A completed typed-plan task shows its wave metrics in its detail and in `/metrics`; a task
without a typed plan shows none. A real control plane, an echo worker, a document of our own
whose planner and judge answer with the JSON that opens their prompts."""

from __future__ import annotations

import json
from typing import Any

import httpx

from shoal.api.server import RunningServer
from shoal.worker.agent import Worker
from tests.api.test_metrics import scrape, value
from tests.runtime.harness import task_detail, wait_until

PLAN = json.dumps({"subtasks": [
    {"name": "A", "type": "step", "description": "a"},
    {"name": "B", "type": "step", "description": "b"},
    {"name": "C", "type": "step", "description": "c", "dependencies": ["A", "B"]},
    {"name": "D", "type": "step", "description": "d", "dependencies": ["C"]}]})
TIERS = f"""\
name: tiers
version: 1
description: A typed plan of three waves, each task gated by a judge.
roles:
  planner: {{prompt: '{PLAN}', tools: [echo]}}
  doer: {{prompt: "Do {{item}}", tools: [echo]}}
  judge:
    prompt: '{{"score": 0.9}}'
    tools: [echo]
    output: {{type: object, required: [score], properties: {{score: {{type: number}}}}}}
steps:
  - id: plan
    kind: expand
    role: planner
    schedule: waves
    types:
      step: {{role: doer, gate: {{judge: judge, min_score: 0.5}}}}
"""


async def _finished(client: httpx.AsyncClient, task_id: str) -> dict[str, Any] | None:
    detail = await task_detail(client, task_id)
    return detail if detail["status"] in ("completed", "failed") else None


async def test_a_completed_typed_plan_shows_its_waves_in_its_detail_and_metrics(
    server: RunningServer, client: httpx.AsyncClient, worker: Worker,
) -> None:
    """Three waves: a ratio in (0, 1], two transitions, each observed once in `/metrics`."""
    added = await client.post("/api/v1/workflows", json={"document": TIERS})
    assert added.status_code == 201, added.text
    before = await scrape(server)
    resp = await client.post("/api/v1/tasks", json={"workflow": "tiers", "description": "q"})
    assert resp.status_code == 201, resp.text
    task_id = resp.json()["task_id"]
    detail = await wait_until(lambda: _finished(client, task_id), what="the task to end")
    assert detail["status"] == "completed", detail["error"]
    assert sorted(s["wave"] for s in detail["subtasks"] if s["wave"] is not None) == [0, 0, 1, 2]
    waves = detail["waves"]
    assert waves["count"] == 3
    assert 0 < waves["parallelism_ratio"] <= 1
    assert len(waves["transitions_ms"]) == 2
    assert all(ms is not None and ms >= 0 for ms in waves["transitions_ms"])
    after = await scrape(server)
    for name, count in (("shoal_task_parallelism_ratio_count", 1),
                        ("shoal_wave_transition_seconds_count", 2)):
        assert value(after, name, workflow="tiers") - value(before, name, workflow="tiers") \
            == count, name


async def test_a_task_without_a_typed_plan_has_no_waves(
    client: httpx.AsyncClient, worker: Worker,
) -> None:
    resp = await client.post("/api/v1/tasks", json={
        "description": "One step", "quality": "off",
        "plan": [{"name": "only", "description": "works", "tool": "echo"}]})
    task_id = resp.json()["task_id"]
    detail = await wait_until(lambda: _finished(client, task_id), what="the task to end")
    assert detail["status"] == "completed"
    assert "waves" not in detail
