"""A task of a document with declared stages shows its stage in its detail and its events."""

from __future__ import annotations

import json

import httpx

from shoal.api.server import RunningServer
from shoal.worker.agent import Worker
from tests.runtime.harness import wait_for_status

TWO_STAGES = """\
name: two_stages
version: 1
description: Write, then polish, each in its stage.
roles:
  writer: {prompt: "Write about {query}", tools: [echo]}
  polisher: {prompt: "Polish {write}", tools: [echo]}
stages:
  initial: init
  allowed: {init: [writing], writing: [polishing]}
  final: done
steps:
  - {id: write, kind: agent, role: writer, stage: writing}
  - {id: polish, kind: agent, role: polisher, after: [write], stage: polishing}
"""


async def test_the_stage_is_on_the_task_and_in_its_events(
        server: RunningServer, client: httpx.AsyncClient, worker: Worker) -> None:
    assert (await client.post("/api/v1/workflows", json={"document": TWO_STAGES})) \
        .status_code == 201
    created = await client.post("/api/v1/tasks", json={"workflow": "two_stages",
                                                       "description": "tides"})
    task = created.json()["task_id"]
    detail = await wait_for_status(client, task, "completed")
    assert detail["stage"] == "done"
    assert "phase" not in detail  # no typed plan
    moves: list[tuple[str, str]] = []
    async with client.stream("GET", f"/api/v1/tasks/{task}/events",
                             params={"since": 0}) as resp:
        async for line in resp.aiter_lines():
            if line.startswith("data: "):
                event = json.loads(line[6:])
                if event["type"] == "stage":
                    moves.append((event["data"]["previous"], event["data"]["stage"]))
                if event["type"] == "task_complete":
                    assert event["data"]["stage"] == "done"
                    break
    assert moves == [("init", "writing"), ("writing", "polishing")]
