"""Deleting what a user owns: a task with everything of it, in one transaction.

The rows go at once (the task's own, by cascade; its events and audit entries; the uploads no
other task reads). Stored files may be shared with other tasks (the store is content-addressed),
so the files are not removed here: their hashes go to `file_sweep` in the same transaction,
and the sweeper removes each file once no row refers to it (`sweep_candidates`). Workers keep
copies too (a task's workspaces; search indexes built on its sources): `delete_task` says which
workers ran the task and which sources no row refers to any more, and `gone` which of what a
worker keeps belongs to nothing stored, so that they are told to delete them.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from shoal.errors import Conflict, NotFound
from shoal.states import TERMINAL_TASK, TaskStatus
from shoal.store.models import (
    Artifact,
    Attempt,
    AuditEntry,
    EventRow,
    FileSweep,
    Task,
    TaskSource,
    Upload,
    table_of,
)

tasks = table_of(Task)
artifacts = table_of(Artifact)
attempts = table_of(Attempt)
events = table_of(EventRow)
audit = table_of(AuditEntry)
task_sources = table_of(TaskSource)
uploads = table_of(Upload)
file_sweep = table_of(FileSweep)


@dataclass(frozen=True, slots=True)
class Deleted:
    """What deleting a task left to clean up elsewhere."""

    files: int  # stored files that may now be unreferenced (queued for the sweeper)
    workers: tuple[uuid.UUID, ...]  # the workers that ran its attempts: they keep workspaces
    sources: tuple[str, ...]  # content hashes of its sources that nothing refers to any more


def delete_task(conn: sa.Connection, task_id: uuid.UUID, user_id: uuid.UUID,
                *, now: datetime) -> Deleted:
    """Delete `user_id`'s ended task `task_id` and everything of it. `NotFound` for a task
    that is not theirs, `Conflict` while it has not ended."""
    pick = sa.select(tasks.c.status).where(tasks.c.id == task_id, tasks.c.user_id == user_id)
    if conn.dialect.name == "postgresql":
        pick = pick.with_for_update()
    status = conn.execute(pick).scalar()
    if status is None:
        raise NotFound(f"No task {task_id}.", details={"task_id": str(task_id)})
    if TaskStatus(status) not in TERMINAL_TASK:
        raise Conflict(f"The task is {status}: cancel it first (POST /api/v1/tasks/{task_id}"
                       "/cancel), then delete it.", code="task_not_ended",
                       details={"status": status})
    only_here = _uploads_only_of(conn, task_id)
    workers = tuple(conn.execute(sa.select(attempts.c.worker_id).where(
        attempts.c.task_id == task_id, attempts.c.worker_id.is_not(None)).distinct()).scalars())
    hashes = set(conn.execute(sa.select(artifacts.c.sha256).where(
        artifacts.c.task_id == task_id).distinct()).scalars())
    sources: set[str] = set()
    for row in conn.execute(sa.select(uploads.c.sha256, uploads.c.text_sha256)
                            .where(uploads.c.id.in_(only_here))):
        sources.update(h for h in (row.sha256, row.text_sha256) if h)
    hashes |= sources
    conn.execute(sa.delete(events).where(events.c.task_id == task_id))
    conn.execute(sa.delete(audit).where(audit.c.task_id == task_id))
    conn.execute(sa.delete(tasks).where(tasks.c.id == task_id))  # cascades to its rows
    if only_here:
        conn.execute(sa.delete(uploads).where(uploads.c.id.in_(only_here)))
    queue_for_sweep(conn, hashes, now=now)
    return Deleted(files=len(hashes), workers=workers,
                   sources=tuple(sorted(sources - still_used(conn, sources))))


def gone(conn: sa.Connection, task_ids: Iterable[uuid.UUID],
         sources: Iterable[str]) -> tuple[list[uuid.UUID], list[str]]:
    """Which of these tasks no longer exist, and which of these sources (content hashes) no
    row refers to: what a worker keeps of them is to be deleted."""
    asked = list(task_ids)
    existing = set(conn.execute(sa.select(tasks.c.id).where(tasks.c.id.in_(asked))).scalars()) \
        if asked else set()
    hashes = set(sources)
    return [t for t in asked if t not in existing], sorted(hashes - still_used(conn, hashes))


def _uploads_only_of(conn: sa.Connection, task_id: uuid.UUID) -> list[uuid.UUID]:
    """The uploads task `task_id` reads that no other task reads."""
    other = sa.select(task_sources.c.upload_id).where(task_sources.c.task_id != task_id)
    return list(conn.execute(
        sa.select(task_sources.c.upload_id).where(task_sources.c.task_id == task_id,
                                                  task_sources.c.upload_id.not_in(other))
    ).scalars())


def queue_for_sweep(conn: sa.Connection, hashes: Iterable[str], *, now: datetime) -> None:
    """Ask the sweeper to look at these stored files (a hash queued already stays once)."""
    rows = [{"sha256": h, "queued_at": now} for h in sorted(set(hashes))]
    if not rows:
        return
    insert = pg_insert if conn.dialect.name == "postgresql" else sqlite_insert
    conn.execute(insert(file_sweep).values(rows).on_conflict_do_nothing())


def sweep_candidates(conn: sa.Connection, *, limit: int) -> list[str]:
    """Hashes waiting for the sweeper, oldest first."""
    return list(conn.execute(sa.select(file_sweep.c.sha256)
                             .order_by(file_sweep.c.queued_at).limit(limit)).scalars())


def still_used(conn: sa.Connection, hashes: Iterable[str]) -> set[str]:
    """Which of `hashes` some row still refers to (a file, an upload or its text)."""
    wanted = list(hashes)
    if not wanted:
        return set()
    used = set(conn.execute(sa.select(artifacts.c.sha256)
                            .where(artifacts.c.sha256.in_(wanted)).distinct()).scalars())
    for column in (uploads.c.sha256, uploads.c.text_sha256):
        used.update(conn.execute(sa.select(column).where(column.in_(wanted))).scalars())
    return used


def swept(conn: sa.Connection, hashes: Iterable[str]) -> None:
    """The sweeper is done with these hashes."""
    done = list(hashes)
    if done:
        conn.execute(sa.delete(file_sweep).where(file_sweep.c.sha256.in_(done)))


def requeue(conn: sa.Connection, hashes: Iterable[str], *, now: datetime,
            after: timedelta) -> None:
    """Look at these again later (files written too recently to be sure of)."""
    later = list(hashes)
    if later:
        conn.execute(sa.update(file_sweep).where(file_sweep.c.sha256.in_(later))
                     .values(queued_at=now + after))
