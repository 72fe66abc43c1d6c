"""The checkpoint commands (`checkpoints`, `checkpoint show`, `approve`, `reject`, `correct`)
against a real control plane, worker and demo model, and `follow`'s checkpoint handler."""

from __future__ import annotations

import asyncio
import io
import re
import uuid
from typing import Any

from rich.console import Console

from shoal.cli.client import Credentials, ShoalClient
from shoal.cli.follow import follow
from tests.cli.harness import LOW_SCORE_PLAN, Plane
from tests.runtime.harness import DEADLINE


async def test_checkpoints_lists_the_waiting_one(plane: Plane, low_score: tuple[str, str]
                                                 ) -> None:
    """`shoal checkpoints` lists a pending checkpoint with its id, reason, subtask and score."""
    result = await plane.shoal("checkpoints")
    assert result.returncode == 0, result.stderr
    assert low_score[1] in result.stdout
    assert "low_score" in result.stdout
    assert "notes" in result.stdout
    assert " 3 " in result.stdout


async def test_checkpoint_show_prints_reason_and_scores(plane: Plane,
                                                        low_score: tuple[str, str]) -> None:
    """`shoal checkpoint show` says why it opened, the scores per dimension and how to answer."""
    result = await plane.shoal("checkpoint", "show", low_score[1])
    assert result.returncode == 0, result.stderr
    assert "low evaluation score" in result.stdout
    assert "'notes' scored 3" in result.stdout
    assert re.search(r"completeness\s+│\s+3\b", result.stdout), result.stdout
    assert re.search(r"architecture\s+│\s+3\b", result.stdout), result.stdout
    assert f"shoal approve {low_score[1]}" in result.stdout


async def test_approve_resumes_the_task(plane: Plane, low_score: tuple[str, str]) -> None:
    """`shoal approve` accepts the work; the task completes and nothing waits any more."""
    task_id, checkpoint_id = low_score
    result = await plane.shoal("approve", checkpoint_id)
    assert result.returncode == 0, result.stderr
    assert "approved" in result.stdout
    await plane.status(task_id, "completed")
    assert "No checkpoint is waiting" in (await plane.shoal("checkpoints")).stdout


async def test_approving_a_decided_checkpoint_fails_clearly(plane: Plane,
                                                            low_score: tuple[str, str]) -> None:
    """Approving a checkpoint twice exits 1 with one line saying it was already decided."""
    checkpoint_id = low_score[1]
    assert (await plane.shoal("approve", checkpoint_id)).returncode == 0
    result = await plane.shoal("approve", checkpoint_id)
    assert result.returncode == 1
    assert f"Checkpoint {checkpoint_id} was already decided (approved)." in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


async def test_reject_cancels_the_task(plane: Plane, low_score: tuple[str, str]) -> None:
    """`shoal reject --reason` cancels the task, with the reason as its error."""
    task_id, checkpoint_id = low_score
    result = await plane.shoal("reject", checkpoint_id, "--reason", "Not what I asked for")
    assert result.returncode == 0, result.stderr
    assert "rejected" in result.stdout
    detail = await plane.status(task_id, "cancelled")
    assert "Not what I asked for" in detail["error"]


async def test_correct_sends_the_subtask_back(plane: Plane, low_score: tuple[str, str]) -> None:
    """`shoal correct --type bug --guidance` answers it and a correction subtask appears."""
    task_id, checkpoint_id = low_score
    result = await plane.shoal("correct", checkpoint_id, "--type", "bug", "--guidance",
                               "Add a heading to the notes.", "--reference", "notes.md")
    assert result.returncode == 0, result.stderr
    assert "corrected" in result.stdout
    shown = await plane.shoal("task", "show", task_id)
    assert "Fix: notes" in shown.stdout
    detail = await plane.shoal("checkpoint", "show", checkpoint_id)
    assert "Correction (bug): Add a heading to the notes." in detail.stdout


async def test_checkpoint_errors_name_the_problem(plane: Plane,
                                                  low_score: tuple[str, str]) -> None:
    """An unknown checkpoint and a malformed subtask id each exit 1 with one clear line."""
    unknown = await plane.shoal("approve", str(uuid.uuid4()))
    assert unknown.returncode == 1
    assert "No checkpoint" in unknown.stderr
    assert "shoal checkpoints" in unknown.stderr
    bad = await plane.shoal("correct", low_score[1], "--type", "bug", "--guidance", "x",
                            "--subtask", "not-an-id")
    assert bad.returncode == 1
    assert "Invalid --subtask" in bad.stderr
    assert "Traceback" not in unknown.stderr + bad.stderr


async def test_follow_hands_each_checkpoint_to_on_checkpoint(plane: Plane) -> None:
    """`follow(on_checkpoint=…)` gets each checkpoint; a handler's error is shown, not raised."""
    task_id = await plane.submit(LOW_SCORE_PLAN)
    seen: list[dict[str, Any]] = []

    async def approve_then_fail(data: dict[str, Any]) -> None:
        seen.append(data)
        await client.approve(data["checkpoint_id"])
        raise RuntimeError("handler broke after approving")

    out = io.StringIO()
    creds = Credentials(plane.server.url, plane.env["SHOAL_TOKEN"])
    async with ShoalClient(creds) as client:
        status = await asyncio.wait_for(
            follow(client, task_id, Console(file=out, width=200), on_checkpoint=approve_then_fail),
            DEADLINE)
    assert status == "completed"
    assert [d["reason"] for d in seen] == ["low_score"]
    assert "handler broke after approving" in out.getvalue()
