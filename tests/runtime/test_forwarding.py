"""Two control-plane copies sharing PostgreSQL (or SQLite) and Redis act as one for a person's
commands: a cancel or a checkpoint decision sent to the copy that does not drive the task is
decided by the copy that does (its refusals come back as they are), and a command for a copy
that died is carried out once its claim expires, by the copy that received it (ADR 0038)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.runtime.harness import GatedEcho, submit, wait_for_status, wait_until
from tests.runtime.test_claims import two_copies

# Held at the gate on the worker (connected to "b", shared with "a": ADR 0039) until the end.
GATED = [{"name": "a", "description": "echo", "tool": "echo", "options": {"gated": True}}]

ASK = """\
name: ask
version: 1
description: Asks the user one thing, then writes.
roles:
  writer: {prompt: "Write about {query} for {city}", tools: [echo]}
steps:
  - {id: question, kind: human, question: "Which city?", writes: city}
  - {id: write, kind: agent, role: writer, after: [question]}
"""


async def test_a_cancel_sent_to_the_other_copy_is_decided_by_the_owner(
    database_url: str, redis_url: str, tmp_path: Path,
) -> None:
    async with two_copies(database_url, tmp_path, claim_ttl=3.0, redis_url=redis_url,
                          worker_tools={"echo": GatedEcho()}) as pair:
        task_id = await submit(pair.client_a, GATED)
        resp = await pair.client_b.post(f"/api/v1/tasks/{task_id}/cancel")
        assert resp.status_code == 200, resp.text
        assert resp.json()["status"] == "cancelled"
        assert (await pair.claim(task_id)).owner == "a"  # "a" decided it; "b" took nothing
        assert not pair.held_by_b(task_id)
        state = pair.a.services.runtime.memory.states.get(uuid.UUID(task_id))
        assert state is None or state.task.status.value == "cancelled"


async def test_an_answer_sent_to_the_other_copy_and_the_owners_refusal(
    database_url: str, redis_url: str, tmp_path: Path,
) -> None:
    async with two_copies(database_url, tmp_path, claim_ttl=3.0, redis_url=redis_url) as pair:
        added = await pair.client_a.post("/api/v1/workflows", json={"document": ASK})
        assert added.status_code == 201, added.text
        created = await pair.client_a.post("/api/v1/tasks", json={"workflow": "ask",
                                                                  "description": "Trams"})
        task_id = created.json()["task_id"]

        async def question() -> dict[str, Any] | None:
            page = (await pair.client_b.get("/api/v1/checkpoints", params={
                "task_id": task_id, "status": "pending_review"})).json()
            return page["checkpoints"][0] if page["checkpoints"] else None

        asked = await wait_until(question, what="the question")
        url = f"/api/v1/checkpoints/{asked['checkpoint_id']}/answer"
        answered = await pair.client_b.post(url, json={"answer": "Lisbon"})
        assert answered.status_code == 200, answered.text
        again = await pair.client_b.post(url, json={"answer": "Porto"})
        assert again.status_code == 409, again.text  # "a"'s refusal, as "a" said it
        detail = await wait_for_status(pair.client_b, task_id, "completed", "failed")
        assert detail["status"] == "completed"  # on "b"'s worker, for "a"
        [write] = [s for s in detail["subtasks"] if s["key"] == "write#1"]
        shown = (await pair.client_b.get(f"/api/v1/subtasks/{write['subtask_id']}")).json()
        assert "for Lisbon" in shown["description"]
        assert (await pair.claim(task_id)).owner == "a"


@pytest.mark.timeout(60)
async def test_a_command_for_a_dead_copys_task_is_carried_out_after_its_claim(
    database_url: str, redis_url: str, tmp_path: Path,
) -> None:
    """"a" dies holding the task: nobody answers "b"'s forwarded cancel, so "b" waits out
    "a"'s claim, takes the task over and cancels it: 200, not a 503 to retry."""
    async with two_copies(database_url, tmp_path, claim_ttl=2.0, b_claim_interval=60,
                          redis_url=redis_url, worker_tools={"echo": GatedEcho()}) as pair:
        task_id = await submit(pair.client_a, GATED)
        await pair.crash_a()
        resp = await pair.client_b.post(f"/api/v1/tasks/{task_id}/cancel")
        assert resp.status_code == 200, resp.text
        assert resp.json()["status"] == "cancelled"
        assert (await pair.claim(task_id)).owner == "b"
