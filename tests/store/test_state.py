"""Task state round-trips through the store, optimistic writes refuse stale versions."""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from shoal.engine import planning
from shoal.engine.inputs import CancelRequested, Dispatched, Finished, Start
from shoal.engine.model import AttemptRecord, StepOutput, TaskMeta, TaskRecord, TaskState
from shoal.engine.step import Context, Decision
from shoal.errors import Conflict
from shoal.states import AttemptStatus, SubtaskStatus, TaskStatus
from shoal.store import accounts
from shoal.store.convert import subtask_from_row, subtask_values, subtasks, task_values, tasks
from shoal.store.db import Database
from shoal.store.models import Base
from shoal.store.state import (
    BatchWriter,
    insert_rows,
    insert_task,
    load_task_states,
    write_decision,
)
from shoal.workflows import decide

NOW = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
PLAN: list[dict[str, Any]] = [
    {"name": "a", "description": "first", "tool": "echo"},
    {"name": "b", "description": "second", "tool": "echo"},
    {"name": "c", "description": "third", "dependencies": ["a", "b"]},
]


async def started_task(db: Database) -> TaskState:
    """A stored user and task, started with PLAN; returns the state as written."""
    async with db.begin() as conn:
        user_id = await accounts.create_user(
            conn, username="alice", password_hash="x", is_admin=False, email=None, now=NOW
        )
        task = TaskRecord(
            id=uuid.uuid4(),
            user_id=user_id,
            description="Do things",
            status=TaskStatus.PENDING,
            created_at=NOW,
            updated_at=NOW,
            tool_preferences=("echo",),
            meta=TaskMeta(requirements={"k": [1, 2]}),
        )
        await insert_task(conn, task)
        empty = TaskState(task=task, subtasks={}, attempts={})
        decision = decide(empty, Start(plan=planning.user_plan(PLAN)), Context(now=NOW))
        return await write_decision(conn, empty, decision)


async def load(db: Database, task_id: uuid.UUID) -> TaskState:
    async with db.connection() as conn:
        (state,) = await load_task_states(conn, [task_id])
    return state


async def unsaved_task(db: Database, username: str) -> TaskRecord:
    """A new pending task of a new stored user, not stored itself."""
    async with db.begin() as conn:
        user_id = await accounts.create_user(conn, username=username, password_hash="x",
                                             is_admin=False, email=None, now=NOW)
    return TaskRecord(id=uuid.uuid4(), user_id=user_id, description="Plan and go",
                      status=TaskStatus.PENDING, created_at=NOW, updated_at=NOW)


async def write(db: Database, old: TaskState, inp: Any, at: datetime = NOW) -> TaskState:
    """Decide `inp` against `old` and store it in its own transaction."""
    async with db.begin() as conn:
        return await write_decision(conn, old, decide(old, inp, Context(now=at)))


def attempt_for(state: TaskState, name: str) -> AttemptRecord:
    sub = next(s for s in state.subtasks.values() if s.name == name)
    return AttemptRecord(
        id=uuid.uuid4(),
        subtask_id=sub.id,
        task_id=state.task.id,
        worker_id=uuid.uuid4(),
        fence=sub.attempts + 1,
        tool="echo",
        status=AttemptStatus.DISPATCHED,
        dispatched_at=NOW,
        lease_expires_at=NOW + timedelta(seconds=30),
    )


async def test_written_decision_loads_back_equal(db: Database) -> None:
    """load_task_states reads back what write_decision returned, the task at version 2."""
    written = await started_task(db)
    assert await load(db, written.task.id) == written
    assert written.task.version == 2
    assert written.task.status is TaskStatus.IN_PROGRESS
    assert sorted(s.version for s in written.subtasks.values()) == [1, 1, 1]


async def test_changed_subtask_version_is_bumped(db: Database) -> None:
    """A dispatched subtask is stored at version 2 with its new attempt."""
    started = await started_task(db)
    att = attempt_for(started, "a")
    written = await write(db, started, Dispatched(att))
    loaded = await load(db, started.task.id)
    assert loaded == written
    assert loaded.subtasks[att.subtask_id].version == 2
    assert loaded.subtasks[att.subtask_id].status is SubtaskStatus.IN_PROGRESS
    assert loaded.attempts == {att.id: att}


async def test_rows_updated_together_with_different_changes_load_back_equal(
    db: Database,
) -> None:
    """Two subtasks updated by one statement, each changing other columns (a JSON one among
    them): each row is written with every column either changed, all read from its record."""
    state = await started_task(db)
    a, b = list(state.subtasks.values())[:2]
    changed = {a.id: replace(a, progress=50, output=StepOutput(text="half")),
               b.id: replace(b, priority=b.priority + 1, description="changed")}
    decision = Decision(state=replace(state, subtasks={**state.subtasks, **changed}),
                        changed_subtasks=set(changed))
    writer = BatchWriter()
    staged = writer.stage(state, decision)
    await db.run_write(writer.flush)
    assert await load(db, state.task.id) == staged
    assert staged.subtasks[b.id].description == "changed"


async def test_a_row_staged_twice_in_one_batch_conflicts(db: Database) -> None:
    """Two updates of one row in one statement would check the same version twice: the writer
    refuses them (`stale_write`) and writes nothing."""
    state = await started_task(db)
    a = next(iter(state.subtasks.values()))
    decision = Decision(state=replace(state, subtasks={**state.subtasks,
                                                       a.id: replace(a, progress=50)}),
                        changed_subtasks={a.id})
    writer = BatchWriter()
    writer.stage(state, decision)
    writer.stage(state, decision)
    with pytest.raises(Conflict, match="staged twice"):
        await db.run_write(writer.flush)
    assert await load(db, state.task.id) == state


async def test_stale_write_conflicts_and_writes_nothing(db: Database) -> None:
    """A decision made on a stale subtask version raises Conflict and rolls back entirely."""
    started = await started_task(db)
    fresh = await write(db, started, Dispatched(attempt_for(started, "a")))
    # `started` still holds subtask "a" at version 1; the task row itself is not stale, so the
    # task update goes through before the subtask update fails, and must be rolled back.
    with pytest.raises(Conflict):
        await write(db, started, CancelRequested(), at=NOW + timedelta(seconds=1))
    assert await load(db, started.task.id) == fresh


async def test_stale_task_version_conflicts(db: Database) -> None:
    """Writing the same decision twice fails the second time: the task version moved on."""
    started = await started_task(db)
    stale = replace(started, task=replace(started.task, version=1))
    with pytest.raises(Conflict):
        await write(db, stale, CancelRequested())
    assert await load(db, started.task.id) == started


async def test_only_live_attempts_are_loaded(db: Database) -> None:
    """A finished attempt is dropped from the loaded state; a dispatched one is kept."""
    state = await started_task(db)
    first, second = attempt_for(state, "a"), attempt_for(state, "b")
    state = await write(db, state, Dispatched(first))
    state = await write(db, state, Dispatched(second))
    state = await write(db, state, Finished(attempt_id=first.id, status="succeeded", output="ok"))
    loaded = await load(db, state.task.id)
    assert set(loaded.attempts) == {second.id}
    assert loaded.subtasks[first.subtask_id].status is SubtaskStatus.COMPLETED
    assert loaded == state


async def test_unfinished_tasks_load_without_ids(db: Database) -> None:
    """With no ids, only tasks that have not ended are loaded."""
    state = await started_task(db)
    async with db.connection() as conn:
        assert [s.task.id for s in await load_task_states(conn)] == [state.task.id]
    await write(db, state, CancelRequested())
    async with db.connection() as conn:
        assert await load_task_states(conn) == []


async def test_a_new_task_is_inserted_with_the_values_its_start_left_it(db: Database) -> None:
    """`stage_new`: the task row goes in once, as started (not inserted as submitted and then
    updated), before its subtasks, with the extra columns given (its claim)."""
    task = await unsaved_task(db, "dora")
    empty = TaskState(task=task, subtasks={}, attempts={})
    decision = decide(empty, Start(plan=planning.user_plan(PLAN)), Context(now=NOW))
    writer = BatchWriter()
    staged = writer.stage_new(empty, decision, owner_id="copy-2", owner_expires_at=NOW)
    inserts, _, updates = writer.staged()
    assert [name for name, _ in inserts] == ["tasks", "subtasks"]
    assert [name for name, _ in updates] == []
    await db.run_write(writer.flush)
    assert await load(db, task.id) == staged
    assert staged.task.status is TaskStatus.IN_PROGRESS
    assert staged.task.version == task.version + 1
    async with db.connection() as conn:
        owner = (await conn.execute(sa.text("SELECT owner_id FROM tasks WHERE id = :i"),
                                    {"i": task.id.hex if db.dialect == "sqlite" else task.id}
                                    )).scalar()
    assert owner == "copy-2"


@pytest.mark.parametrize("paramstyle", ["qmark", "named"])
def test_an_update_is_written_alike_with_positional_or_named_parameters(
    tmp_path: Any, paramstyle: str,
) -> None:
    """A driver whose parameters are named gets no prepared statement (`fast.prepared` gives
    None): the version-checked update goes through SQLAlchemy with a dict a row, and stores
    what the prepared statement, fed from the records, stores; a stale row conflicts either
    way and changes nothing."""
    engine = sa.create_engine(f"sqlite:///{tmp_path}/db.sqlite", paramstyle=paramstyle)
    Base.metadata.create_all(engine)
    task = TaskRecord(id=uuid.uuid4(), user_id=uuid.uuid4(), description="d",
                      status=TaskStatus.PENDING, created_at=NOW, updated_at=NOW)
    empty = TaskState(task=task, subtasks={}, attempts={})
    state = decide(empty, Start(plan=planning.user_plan(PLAN)), Context(now=NOW)).state
    a, b = list(state.subtasks.values())[:2]
    with engine.begin() as conn:
        insert_rows(conn, tasks, [task_values(state.task)])
        insert_rows(conn, subtasks, [subtask_values(s) for s in state.subtasks.values()])
    changed = {a.id: replace(a, progress=50, output=StepOutput(text="half"), not_before=NOW),
               b.id: replace(b, priority=b.priority + 1, description="changed")}
    decision = Decision(state=replace(state, subtasks={**state.subtasks, **changed}),
                        changed_subtasks=set(changed))
    writer = BatchWriter()
    staged = writer.stage(state, decision)
    with engine.begin() as conn:
        writer.flush(conn)
    with engine.connect() as conn:
        stored = {r.id: subtask_from_row(r) for r in conn.execute(sa.select(subtasks))}
    assert stored == staged.subtasks
    assert stored[a.id].output == StepOutput(text="half")
    assert stored[a.id].version == 2
    writer.stage(state, decision)  # from the versions before: stale now
    with pytest.raises(Conflict), engine.begin() as conn:
        writer.flush(conn)
    with engine.connect() as conn:
        assert {r.id: subtask_from_row(r) for r in conn.execute(sa.select(subtasks))} == stored
    engine.dispose()
