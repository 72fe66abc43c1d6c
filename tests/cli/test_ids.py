"""Ids as a person types them, against a real control plane: `shoal tasks` shows ids short
enough to read and long enough to type back, any start of 6 or more characters names a task
or a checkpoint, an ambiguous start lists what it matches, and a shorter one is refused."""

from __future__ import annotations

import re
import uuid

from shoal.engine.model import TaskMeta, TaskRecord
from shoal.states import TaskStatus
from shoal.store.models import utcnow
from shoal.store.state import insert_task_sync
from tests.cli.harness import Plane

TWINS = ("abcdef01-0000-4000-8000-000000000001", "abcdef01-0000-4000-8000-000000000002")


async def add_ended_tasks(plane: Plane, *ids: str) -> None:
    """Completed tasks of the signed-in user with the given ids."""
    me = (await plane.http.get("/api/v1/users/me")).json()["user_id"]
    for n, tid in enumerate(ids):
        now = utcnow()
        task = TaskRecord(id=uuid.UUID(tid), user_id=uuid.UUID(me), description=f"twin {n}",
                          status=TaskStatus.COMPLETED, created_at=now, updated_at=now,
                          meta=TaskMeta())
        await plane.server.services.db.run_write(lambda conn, t=task: insert_task_sync(conn, t))


async def test_a_task_is_named_by_the_start_of_its_id(plane: Plane) -> None:
    """`shoal tasks` shows each id as 8 characters, which `task show` and `cancel` take back,
    as they take 6; 5 are refused saying how many it takes."""
    task_id = await plane.submit([{"name": "wait", "tool": "echo", "description": "waits",
                                   "options": {"delay": 30}}])
    listed = await plane.shoal("tasks")
    assert listed.returncode == 0, listed.stderr
    assert re.search(rf"│ {task_id[:8]} +│", listed.stdout), listed.stdout
    assert task_id not in listed.stdout
    shown = await plane.shoal("task", "show", task_id[:8])
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith(task_id)
    cancelled = await plane.shoal("cancel", task_id[:6])
    assert cancelled.returncode == 0, cancelled.stderr
    assert f"{task_id} cancelled" in cancelled.stdout
    short = await plane.shoal("task", "show", task_id[:5])
    assert short.returncode == 1
    assert "too short to name a task: give at least 6 characters" in short.stderr
    assert "Traceback" not in short.stderr + short.stdout


async def test_an_ambiguous_start_lists_its_matches(plane: Plane) -> None:
    """A start two tasks' ids share names neither: the command lists both; `shoal tasks`
    shows those ids long enough to tell apart."""
    await add_ended_tasks(plane, *TWINS)
    both = await plane.shoal("task", "show", "abcdef01")
    assert both.returncode == 1
    assert "abcdef01 is the start of 2 tasks' ids; give more of it:" in both.stderr
    for n, tid in enumerate(TWINS):
        assert f"{tid}: completed, twin {n}" in both.stderr
    one = await plane.shoal("task", "show", TWINS[1].replace("-", "")[:32])
    assert one.returncode == 0, one.stderr
    listed = await plane.shoal("tasks")
    assert all(tid in listed.stdout for tid in TWINS), listed.stdout
    unknown = await plane.shoal("task", "report", "abcdef02")
    assert unknown.returncode == 1
    assert "No task abcdef02 (or it is not yours). List them with: shoal tasks" in unknown.stderr


async def test_a_checkpoint_is_named_by_the_start_of_its_id(
        plane: Plane, low_score: tuple[str, str]) -> None:
    """`checkpoint show`, `checkpoints --task` and `approve` take the start of an id."""
    task_id, checkpoint_id = low_score
    shown = await plane.shoal("checkpoint", "show", checkpoint_id[:7])
    assert shown.returncode == 0, shown.stderr
    assert f"Checkpoint {checkpoint_id}" in shown.stdout
    listed = await plane.shoal("checkpoints", "--task", task_id[:8])
    assert listed.returncode == 0, listed.stderr
    assert checkpoint_id in listed.stdout
    approved = await plane.shoal("approve", checkpoint_id[:6])
    assert approved.returncode == 0, approved.stderr
    assert f"Checkpoint {checkpoint_id} approved" in approved.stdout
