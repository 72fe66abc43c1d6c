"""A task's budget in the engine: what live attempts report counts at once; past a limit the
task ends `budget_exceeded`, naming the limit, and what its attempts spent stays counted."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from shoal.engine import planning
from shoal.engine.inputs import BudgetCheck, Dispatched, Finished, Start, UsageReported
from shoal.engine.model import (
    AttemptRecord,
    Budget,
    BudgetLimit,
    TaskMeta,
    TaskRecord,
    TaskState,
)
from shoal.engine.step import Context
from shoal.events import EventType
from shoal.states import AttemptStatus, TaskStatus
from shoal.workflows import decide

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _running(budget: Budget | None) -> tuple[TaskState, AttemptRecord]:
    task = TaskRecord(id=uuid.uuid4(), user_id=uuid.uuid4(), description="spend",
                      status=TaskStatus.PENDING, created_at=NOW, updated_at=NOW,
                      meta=TaskMeta(budget=budget))
    items = [{"name": "a", "description": "one", "tool": "echo"}]
    state = decide(TaskState(task=task, subtasks={}, attempts={}),
                   Start(plan=planning.user_plan(items), slot=1), Context(now=NOW)).state
    (sub,) = state.subtasks.values()
    att = AttemptRecord(id=uuid.uuid4(), subtask_id=sub.id, task_id=task.id,
                        worker_id=uuid.uuid4(), fence=1, tool="echo",
                        status=AttemptStatus.DISPATCHED, dispatched_at=NOW)
    return decide(state, Dispatched(att), Context(now=NOW)).state, att


@pytest.mark.parametrize(("budget", "usage", "limit"), [
    (Budget(tokens=100), {"input_tokens": 60, "output_tokens": 40}, BudgetLimit.TOKENS),
    (Budget(cost_usd=0.5), {"cost_usd": 0.5}, BudgetLimit.COST_USD),
])
def test_a_live_attempt_past_the_budget_ends_the_task(
    budget: Budget, usage: dict[str, float], limit: BudgetLimit,
) -> None:
    """The report that reaches a limit ends the task, cancels the attempt, keeps its usage."""
    state, att = _running(budget)
    d = decide(state, UsageReported(att.id, usage), Context(now=NOW))
    assert d.state.task.status is TaskStatus.BUDGET_EXCEEDED
    assert d.state.task.slot is None
    assert [c.id for c in d.cancels] == [att.id]
    (notice,) = [e for e in d.events if e.type is EventType.NOTICE]
    assert notice.data["limit"] == limit.value
    spent = (d.state.task.input_tokens + d.state.task.output_tokens, d.state.task.cost_usd)
    assert spent == (int(usage.get("input_tokens", 0) + usage.get("output_tokens", 0)),
                     usage.get("cost_usd", 0.0))


def test_below_the_budget_or_without_one_nothing_ends() -> None:
    """Usage under the limit is kept on the attempt; a task without a budget ignores time."""
    state, att = _running(Budget(tokens=100))
    d = decide(state, UsageReported(att.id, {"input_tokens": 99}), Context(now=NOW))
    assert d.state.task.status is TaskStatus.IN_PROGRESS
    assert d.state.attempts[att.id].usage == {"input_tokens": 99}
    later = Context(now=NOW + timedelta(days=9))
    assert decide(_running(None)[0], BudgetCheck(), later).state.task.status \
        is TaskStatus.IN_PROGRESS


def test_time_runs_out() -> None:
    """`BudgetCheck` past the seconds allowed ends the task."""
    state, _ = _running(Budget(seconds=60))
    assert decide(state, BudgetCheck(), Context(now=NOW + timedelta(seconds=59))).state.task \
        .status is TaskStatus.IN_PROGRESS
    ended = decide(state, BudgetCheck(), Context(now=NOW + timedelta(seconds=60))).state
    assert ended.task.status is TaskStatus.BUDGET_EXCEEDED
    assert "seconds" in (ended.task.error or "")


def test_a_finished_attempts_spending_counts_once() -> None:
    """The attempt that ends is in the task's sums once: 60 of 100 tokens, then a step with 60
    more that is still running when it reports them ends the task with 120, not 180."""
    items = [{"name": "a", "description": "one", "tool": "echo"},
             {"name": "b", "description": "two", "tool": "echo"}]
    task = TaskRecord(id=uuid.uuid4(), user_id=uuid.uuid4(), description="spend",
                      status=TaskStatus.PENDING, created_at=NOW, updated_at=NOW,
                      meta=TaskMeta(budget=Budget(tokens=100)))
    state = decide(TaskState(task=task, subtasks={}, attempts={}),
                   Start(plan=planning.user_plan(items), slot=1), Context(now=NOW)).state
    first, second = (AttemptRecord(id=uuid.uuid4(), subtask_id=sub.id, task_id=task.id,
                                   worker_id=uuid.uuid4(), fence=1, tool="echo",
                                   status=AttemptStatus.DISPATCHED, dispatched_at=NOW)
                     for sub in state.subtasks.values())
    state = decide(state, Dispatched(first), Context(now=NOW)).state
    state = decide(state, Dispatched(second), Context(now=NOW)).state
    done = decide(state, Finished(attempt_id=first.id, status="succeeded", output="ok",
                                  usage={"input_tokens": 60}), Context(now=NOW)).state
    assert done.task.status is TaskStatus.IN_PROGRESS  # 60 of 100, counted once
    over = decide(done, UsageReported(second.id, {"input_tokens": 60}), Context(now=NOW)).state
    assert over.task.status is TaskStatus.BUDGET_EXCEEDED
    assert over.task.input_tokens == 120
