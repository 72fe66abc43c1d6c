"""A task's active-task slot in the engine: a task that must wait is `queued` and keeps its
plan; it starts holding a slot, with that plan; it gives the slot back however it ends."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from shoal.engine import planning
from shoal.engine.inputs import CancelRequested, Queued, Start
from shoal.engine.model import TaskRecord, TaskState
from shoal.engine.step import Context
from shoal.errors import Conflict
from shoal.events import EventType
from shoal.states import TaskStatus
from shoal.workflows import decide

NOW = datetime(2026, 1, 1, tzinfo=UTC)
ITEMS = ({"name": "a", "description": "one", "tool": "echo", "options": {"x": 1}},)


def _new() -> TaskState:
    task = TaskRecord(id=uuid.uuid4(), user_id=uuid.uuid4(), description="wait",
                      status=TaskStatus.PENDING, created_at=NOW, updated_at=NOW)
    return TaskState(task=task, subtasks={}, attempts={})


def test_a_queued_task_keeps_its_plan_and_says_its_position() -> None:
    """`Queued` makes the task `queued`, holding no slot and its plan as sent."""
    d = decide(_new(), Queued(2, plan=ITEMS), Context(now=NOW))
    assert d.state.task.status is TaskStatus.QUEUED
    assert d.state.task.slot is None
    assert d.state.task.meta.plan == ITEMS
    assert not d.state.subtasks
    (event,) = d.events
    assert event.type is EventType.TASK_UPDATE
    assert event.data["queue_position"] == 2


def test_a_queued_task_starts_holding_its_slot_and_forgets_the_kept_plan() -> None:
    """`Start` with a slot takes a queued task through `pending` to running its plan."""
    queued = decide(_new(), Queued(1, plan=ITEMS), Context(now=NOW)).state
    start = Start(plan=planning.user_plan([{k: v for k, v in ITEMS[0].items()
                                            if k != "options"}]), options=({"x": 1},), slot=3)
    d = decide(queued, start, Context(now=NOW))
    assert d.state.task.status is TaskStatus.IN_PROGRESS
    assert d.state.task.slot == 3
    assert d.state.task.meta.plan == ()
    assert [s.name for s in d.state.subtasks.values()] == ["a"]


@pytest.mark.parametrize("queued_first", [False, True])
def test_ending_gives_the_slot_back(queued_first: bool) -> None:
    """A cancelled task holds no slot, whether it ran or waited."""
    state = _new()
    if queued_first:
        state = decide(state, Queued(1), Context(now=NOW)).state
    else:
        state = decide(state, Start(plan=planning.user_plan([dict(ITEMS[0])]), slot=1),
                       Context(now=NOW)).state
        assert state.task.slot == 1
    d = decide(state, CancelRequested(), Context(now=NOW))
    assert d.state.task.status is TaskStatus.CANCELLED
    assert d.state.task.slot is None


def test_a_started_task_cannot_be_queued() -> None:
    """Only a task just submitted may wait."""
    started = decide(_new(), Start(slot=1), Context(now=NOW)).state
    with pytest.raises(Conflict):
        decide(started, Queued(1), Context(now=NOW))
