"""An attempt a worker declines (no free slot, or leaving) never ran: its subtask is queued
again at once with the try it did not spend, while its fence still counts it."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from shoal.engine import planning
from shoal.engine.inputs import Declined, Dispatched, Finished, Start
from shoal.engine.model import AttemptRecord, SubtaskRecord, TaskRecord, TaskState
from shoal.engine.retry import RetryPolicy
from shoal.engine.step import Context
from shoal.states import AttemptStatus, SubtaskStatus, TaskStatus
from shoal.workflows import decide

NOW = datetime(2026, 1, 1, tzinfo=UTC)
CTX = Context(now=NOW, retry=RetryPolicy(max_attempts=1, delays=(0.0,)))


def _one_step() -> TaskState:
    task = TaskRecord(id=uuid.uuid4(), user_id=uuid.uuid4(), description="one step",
                      status=TaskStatus.PENDING, created_at=NOW, updated_at=NOW)
    plan = planning.user_plan([{"name": "s", "description": "step", "tool": "echo",
                                "dependencies": []}])
    return decide(TaskState(task=task, subtasks={}, attempts={}), Start(plan=plan), CTX).state


def _dispatch(state: TaskState) -> tuple[TaskState, AttemptRecord]:
    [sub] = state.subtasks.values()
    att = AttemptRecord(id=uuid.uuid4(), subtask_id=sub.id, task_id=state.task.id,
                        worker_id=uuid.uuid4(), fence=sub.attempts + sub.declines + 1,
                        tool="echo", status=AttemptStatus.DISPATCHED, dispatched_at=NOW)
    return decide(state, Dispatched(att), CTX).state, att


def _only(state: TaskState) -> SubtaskRecord:
    [sub] = state.subtasks.values()
    return sub


def test_a_declined_attempt_spends_no_try() -> None:
    """With one try allowed, three declines in a row leave the subtask queued, its try
    unspent; the attempt that then runs has fence 4 and its success completes the task."""
    state = _one_step()
    for n in range(1, 4):
        state, att = _dispatch(state)
        assert att.fence == n
        decision = decide(state, Declined(att.id, "worker has no free slot"), CTX)
        state = decision.state
        sub = _only(state)
        assert (sub.status, sub.attempts, sub.declines) == (SubtaskStatus.QUEUED, 0, n)
        assert (sub.current_attempt_id, sub.not_before) == (None, None)  # placed again now
        ended = decision.changed_attempts[att.id]  # stored; the state keeps live ones only
        assert (ended.status, ended.error) == (AttemptStatus.DECLINED, "worker has no free slot")
        assert att.id not in state.attempts
        [event] = [e for e in decision.events if e.data.get("declined")]
        assert event.data["declined"] == "worker has no free slot"
    state, att = _dispatch(state)
    assert att.fence == 4
    done = decide(state, Finished(attempt_id=att.id, status="succeeded", output="ok"), CTX)
    assert done.state.task.status is TaskStatus.COMPLETED
    assert _only(done.state).attempts == 1


def test_a_failure_after_declines_still_gets_every_try() -> None:
    """A real failure counts: with one try allowed, the subtask fails at its first failure,
    however many declines came before (declines never stand in for tries)."""
    state = _one_step()
    state, att = _dispatch(state)
    state = decide(state, Declined(att.id, "worker is shutting down"), CTX).state
    state, att = _dispatch(state)
    failed = decide(state, Finished(attempt_id=att.id, status="failed", error="boom"), CTX)
    assert _only(failed.state).status is SubtaskStatus.FAILED
    assert "after 1 attempt" in (failed.state.task.error or "")
