"""`DispatchedAll` is exactly a `Dispatched` per attempt, in order, in one decision; and an
attempt's result stands in for a `task_accepted` that never came."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

import pytest

from shoal.engine import planning
from shoal.engine.inputs import Dispatched, DispatchedAll, Finished, Start, Started
from shoal.engine.model import (
    AttemptRecord,
    FileRef,
    StepOutput,
    TaskRecord,
    TaskState,
    changed_fields,
    evolve,
)
from shoal.engine.step import Context, Decision
from shoal.states import AttemptStatus, SubtaskStatus, TaskStatus
from shoal.workflows import decide

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _started(width: int) -> TaskState:
    task = TaskRecord(id=uuid.uuid4(), user_id=uuid.uuid4(), description="fan out",
                      status=TaskStatus.PENDING, created_at=NOW, updated_at=NOW)
    items = [{"name": f"s{i}", "description": "step", "tool": "echo", "dependencies": []}
             for i in range(width)]
    start = Start(plan=planning.user_plan(items))
    return decide(TaskState(task=task, subtasks={}, attempts={}), start, Context(now=NOW)).state


def _attempts(state: TaskState) -> tuple[AttemptRecord, ...]:
    worker = uuid.uuid4()
    return tuple(
        AttemptRecord(id=uuid.uuid4(), subtask_id=sub.id, task_id=state.task.id,
                      worker_id=worker, fence=sub.attempts + 1, tool="echo",
                      status=AttemptStatus.DISPATCHED, dispatched_at=NOW)
        for sub in state.subtasks.values() if sub.status is SubtaskStatus.QUEUED)


def test_dispatched_all_equals_one_dispatched_each() -> None:
    """Same state, same changes, same events in the same order."""
    state = _started(5)
    attempts = _attempts(state)
    ctx = Context(now=NOW)
    together = decide(state, DispatchedAll(attempts), ctx)
    current, events, changed, new_attempts = state, [], set(), set()
    for att in attempts:
        one: Decision = decide(current, Dispatched(att), ctx)
        current = one.state
        events.extend(one.events)
        changed |= one.changed_subtasks
        new_attempts |= one.new_attempts
    assert together.state == current
    assert [(e.type, e.data) for e in together.events] == [(e.type, e.data) for e in events]
    assert together.changed_subtasks == changed
    assert together.new_attempts == new_attempts == {a.id for a in attempts}


def test_evolve_matches_dataclasses_replace() -> None:
    """`evolve` gives the value `dataclasses.replace` gives, and refuses unknown fields."""
    sub = next(iter(_started(1).subtasks.values()))
    changes = {"status": SubtaskStatus.IN_PROGRESS, "attempts": 1, "progress": 0}
    assert evolve(sub, **changes) == replace(sub, **changes)
    with pytest.raises(TypeError):
        evolve(sub, no_such_field=1)
    assert evolve(sub) == sub
    assert evolve(sub) is not sub
    state = _started(1)
    assert evolve(state, task=state.task) == state


@dataclass(frozen=True)
class _Unslotted:
    name: str


def test_evolve_refuses_a_record_without_slots() -> None:
    """`evolve` sets each field through its slot: a dataclass without slots is named, not
    copied wrong."""
    with pytest.raises(TypeError, match="_Unslotted is not a slotted dataclass"):
        evolve(_Unslotted("a"), name="b")


def test_changed_fields_names_exactly_the_fields_that_differ() -> None:
    """`changed_fields` (what an update writes) names every differing field and no other."""
    sub = next(iter(_started(1).subtasks.values()))
    assert changed_fields(sub, sub) == ()
    after = evolve(sub, status=SubtaskStatus.IN_PROGRESS, progress=7,
                   output=StepOutput(text="x", files=(FileRef("a.py", 1, "0" * 64),)))
    assert changed_fields(sub, after) == ("status", "progress", "output")
    assert after.output is not None
    same = evolve(after, output=StepOutput.from_json(after.output.to_json()))
    assert same.output is not after.output
    assert changed_fields(after, same) == ()  # equal, not identical: not a change


def test_result_without_task_accepted_dates_the_start_from_its_duration() -> None:
    """A quick attempt's worker sends no `task_accepted`; its result dates the start."""
    state = _started(1)
    att = _attempts(state)[0]
    state = decide(state, Dispatched(att), Context(now=NOW)).state
    later = NOW + timedelta(seconds=10)
    done = decide(state, Finished(attempt_id=att.id, status="succeeded", duration_seconds=2.5),
                  Context(now=later))
    assert done.changed_attempts[att.id].started_at == later - timedelta(seconds=2.5)
    # With a `task_accepted`, its time stands; and a start never precedes the dispatch.
    accepted = decide(state, Started(att.id), Context(now=NOW + timedelta(seconds=1))).state
    done = decide(accepted, Finished(attempt_id=att.id, status="succeeded",
                                     duration_seconds=2.5), Context(now=later))
    assert done.changed_attempts[att.id].started_at == NOW + timedelta(seconds=1)
    done = decide(state, Finished(attempt_id=att.id, status="succeeded",
                                  duration_seconds=60.0), Context(now=later))
    assert done.changed_attempts[att.id].started_at == NOW


def test_progress_counts_carried_between_decisions_match_a_recount() -> None:
    """The (runs, completed) counts of each round a state carries stay equal to counting its
    subtasks, and the task's progress follows them, failures and retries included."""
    state = _started(4)

    def recount(st: TaskState) -> dict[str, tuple[int, int]]:
        counts: dict[str, tuple[int, int]] = {}
        for s in st.subtasks.values():
            if s.kind == "agent":
                total, done = counts.get(s.key.partition(".")[0], (0, 0))
                counts[s.key.partition(".")[0]] = (
                    total + 1, done + (s.status is SubtaskStatus.COMPLETED))
        return counts

    outcomes = ["succeeded", "failed", "succeeded", "succeeded", "succeeded"]
    for status in outcomes:
        att = _attempts(state)[0]
        state = decide(state, Dispatched(att), Context(now=NOW)).state
        state = decide(state, Finished(attempt_id=att.id, status=status, error="boom"),
                       Context(now=NOW)).state
        assert state.rounds is None or state.rounds == recount(state)
        [(total, done)] = recount(state).values()  # the plan's subtasks are one round
        ended = state.task.status is TaskStatus.COMPLETED
        assert state.task.progress == (100 if ended else 5 + int(90 * done / total))
    assert list(recount(state).values()) == [(4, 4)]
    assert state.rounds == recount(state)


def test_a_result_that_used_nothing_does_not_rewrite_the_task() -> None:
    """Token and cost totals grow with a result's usage; a failed attempt that used nothing
    (and moved no progress) leaves the task's row as it was."""
    state = _started(2)
    att = _attempts(state)[0]
    state = decide(state, Dispatched(att), Context(now=NOW)).state
    failed = decide(state, Finished(attempt_id=att.id, status="failed", error="boom"),
                    Context(now=NOW))
    assert not failed.task_changed
    assert failed.state.task == state.task
    again = _attempts(failed.state)[0]
    state = decide(failed.state, Dispatched(again), Context(now=NOW)).state
    used = decide(state, Finished(attempt_id=again.id, status="failed", error="boom",
                                  usage={"input_tokens": 7, "output_tokens": 3,
                                         "cost_usd": 0.5}), Context(now=NOW))
    assert used.task_changed
    task = used.state.task
    assert (task.input_tokens, task.output_tokens, task.cost_usd) == (7, 3, 0.5)
