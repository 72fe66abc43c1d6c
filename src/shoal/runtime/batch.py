"""One group commit's worth of work: per-task accumulated decisions plus loose writes, how they are
written in one transaction, and the read connection a batch opens only if memory lacks
something."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection as SyncConnection
from sqlalchemy import Table
from sqlalchemy.ext.asyncio import AsyncConnection

from shoal.artifacts.store import ArtifactStore
from shoal.engine.model import AttemptRecord, TaskRecord, TaskState
from shoal.engine.step import Decision
from shoal.events import Event, NewEvent, compact
from shoal.runtime.fleet import Connection
from shoal.store import files as file_rows
from shoal.store import pg_batch
from shoal.store.db import Database
from shoal.store.events import append_events_sync
from shoal.store.state import BatchWriter, insert_rows


class TaskWork:
    """Decisions about one task within a batch, merged into one write."""

    def __init__(self, old: TaskState) -> None:
        self.old = old
        self.state = old
        self.merged = Decision(state=old)

    def apply(self, d: Decision) -> None:
        """Fold one more decision in (a decision changes a few of these: the empty ones are
        skipped, not merged with a call each)."""
        m = self.merged
        self.state = m.state = d.state
        m.task_changed |= d.task_changed
        if d.new_subtasks:
            m.new_subtasks.extend(d.new_subtasks)
        if d.changed_subtasks:
            if m.new_subtasks:
                fresh = set(m.new_subtasks)
                m.changed_subtasks.update(s for s in d.changed_subtasks if s not in fresh)
            else:
                m.changed_subtasks.update(d.changed_subtasks)
        if d.changed_attempts:
            m.changed_attempts.update(d.changed_attempts)
        if d.new_attempts:
            m.new_attempts.update(d.new_attempts)
        if d.cancels:
            m.cancels.extend(d.cancels)
        if d.new_checkpoints:
            m.new_checkpoints.extend(d.new_checkpoints)
        if d.changed_checkpoints:
            m.changed_checkpoints.update(d.changed_checkpoints)
        if d.records:
            m.records.extend(d.records)
        if d.files:
            m.files.extend(d.files)

    @property
    def dirty(self) -> bool:
        """Whether anything needs writing."""
        m = self.merged
        return bool(m.task_changed or m.new_subtasks or m.changed_subtasks or m.changed_attempts
                    or m.changed_checkpoints or m.records or m.files)


SqlStep = Callable[[SyncConnection], None]


@dataclass(slots=True)
class Batch:
    """Everything one transaction will write and, after commit, send and publish."""

    now: datetime
    new_tasks: list[TaskRecord] = field(default_factory=list)
    works: dict[uuid.UUID, TaskWork] = field(default_factory=dict)
    events: list[NewEvent] = field(default_factory=list)  # in the order they were decided
    sql: list[SqlStep] = field(default_factory=list)
    rows: list[tuple[Table, list[dict[str, Any]]]] = field(default_factory=list)  # plain inserts
    dispatches: list[tuple[Connection, AttemptRecord]] = field(default_factory=list)
    messages: list[tuple[Connection, str]] = field(default_factory=list)  # sent before dispatches
    reserved: list[tuple[Connection, uuid.UUID]] = field(default_factory=list)
    joined: list[Connection] = field(default_factory=list)
    closes: list[Connection] = field(default_factory=list)
    fenced: list[str] = field(default_factory=list)  # tools of results refused: lease lost
    beats: list[float] = field(default_factory=list)  # when each heartbeat handled was read
    owner: str | None = None  # the control-plane copy that claims the tasks this batch creates
    owner_expires_at: datetime | None = None  # … until then
    slots: dict[uuid.UUID, set[int]] = field(default_factory=dict)  # user → slots given
    queued: dict[uuid.UUID, int] = field(default_factory=dict)  # user → tasks queued

    def apply(self, work: TaskWork, d: Decision) -> None:
        """Fold a decision into its task's work and keep its events in order."""
        work.apply(d)
        if d.events:
            self.events.extend(d.events)

    async def store_files(self, artifacts: ArtifactStore) -> None:
        """Store the files the engine wrote in this batch's decisions, each a new version of
        its subtask's file, and add their artifact rows to the batch's writes."""
        rows: list[dict[str, Any]] = []
        # A microsecond after the files of the results this batch took in: the version the
        # engine wrote from one (a report marked partial) is the newest.
        after = self.now + timedelta(microseconds=1)
        for task_id, work in self.works.items():
            for written in work.merged.files:
                data = written.text.encode("utf-8")
                entry = {"path": written.path, "size": len(data),
                         "sha256": await artifacts.put(data)}
                rows += file_rows.manifest_rows(task_id=task_id, subtask_id=written.subtask_id,
                                                attempt_id=written.id, entries=[entry],
                                                now=after)
        if rows:
            self.rows.append((file_rows.artifacts, rows))

    async def commit(self, db: Database) -> tuple[dict[uuid.UUID, TaskState], list[Event]]:
        """Write everything in one transaction — on PostgreSQL one self-committing statement,
        one round trip, unless it needs extra SQL steps (heartbeats, registrations; ADR 0023)
        — and return each changed task's state as stored and the events as appended."""
        if db.is_postgres and not self.sql:
            writer, states = self._stage()
            stored = await pg_batch.commit(db, writer, compact(self.events), self.now,
                                           rows=self.rows)
            if stored is not None:
                return states, stored
        written: tuple[dict[uuid.UUID, TaskState], list[Event]] = await db.run_write(
            self._write, inline=True)
        return written

    def _write(self, conn: SyncConnection) -> tuple[dict[uuid.UUID, TaskState], list[Event]]:
        """Everything the batch changed, in one transaction (runs on the store's writer)."""
        writer, states = self._stage()
        writer.flush(conn)
        for table, rows in self.rows:
            insert_rows(conn, table, rows)
        for step in self.sql:
            step(conn)
        return states, append_events_sync(conn, compact(self.events), self.now)

    def _stage(self) -> tuple[BatchWriter, dict[uuid.UUID, TaskState]]:
        """The row changes, staged, and each changed task's state as it will be stored; a new
        task's row is staged as one insert of its final values, with this copy's claim."""
        writer = BatchWriter()
        claim = ({"owner_id": self.owner, "owner_expires_at": self.owner_expires_at}
                 if self.owner is not None else {})
        new = {task.id for task in self.new_tasks}
        states = {tid: (writer.stage_new(work.old, work.merged, **claim) if tid in new
                        else writer.stage(work.old, work.merged))
                  for tid, work in self.works.items() if work.dirty or tid in new}
        return writer, states


class Reader:
    """A read connection opened on first use: most batches need nothing memory does not hold,
    and checking a pooled connection out and back in (a rollback) costs more than their work."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._ctx: Any = None
        self._conn: AsyncConnection | None = None

    async def conn(self) -> AsyncConnection:
        """The connection, opened now if this is the first read of the batch."""
        if self._conn is None:
            ctx = self._db.connection()
            self._conn = await ctx.__aenter__()
            self._ctx = ctx
        return self._conn

    async def __aenter__(self) -> Reader:
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._ctx is not None:
            ctx, self._ctx, self._conn = self._ctx, None, None
            await ctx.__aexit__(*exc)
