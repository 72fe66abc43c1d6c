"""Artifact rows: the manifest of files each accepted attempt produced."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from shoal.ids import new_ordered_id
from shoal.store.models import Artifact, Subtask, Task, table_of

artifacts = table_of(Artifact)
CACHE_PREFIX = ".index/"  # a task's search indexes (`shoal.retrieval.handoff`): not its work


def manifest_rows(
    *, task_id: uuid.UUID, subtask_id: uuid.UUID, attempt_id: uuid.UUID,
    entries: Sequence[Mapping[str, Any]], now: datetime,
) -> list[dict[str, Any]]:
    """The `artifacts` rows recording the files of an accepted attempt."""
    return [{"id": new_ordered_id(), "task_id": task_id, "subtask_id": subtask_id,
             "attempt_id": attempt_id, "path": e["path"], "size": e["size"],
             "sha256": e["sha256"], "created_at": now} for e in entries]


async def index_caches(conn: AsyncConnection, user_id: uuid.UUID,
                       shas: Sequence[str]) -> list[sa.Row[Any]]:
    """The newest version of each index file (`.index/<sha256>.…`) that the user's tasks
    produced for the sources whose content hashes are `shas`."""
    if not shas:
        return []
    tasks = table_of(Task)
    q = (sa.select(artifacts.c.path, artifacts.c.sha256, artifacts.c.size)
         .join(tasks, tasks.c.id == artifacts.c.task_id)
         .where(tasks.c.user_id == user_id,
                sa.or_(*(artifacts.c.path.like(f"{CACHE_PREFIX}{sha}.%") for sha in shas)))
         .order_by(artifacts.c.created_at.desc()))
    newest: dict[str, Any] = {}  # path → its newest row (path, sha256, size)
    for row in (await conn.execute(q)).all():
        newest.setdefault(row.path, row)
    return list(newest.values())


async def subtask_files(conn: AsyncConnection, subtask_id: uuid.UUID) -> list[sa.Row[Any]]:
    """The manifest of a subtask's accepted attempt(s), path order (its work: not the search
    indexes it passed on, `CACHE_PREFIX`)."""
    q = (sa.select(artifacts).where(artifacts.c.subtask_id == subtask_id,
                                    ~artifacts.c.path.startswith(CACHE_PREFIX))
         .order_by(artifacts.c.path, artifacts.c.created_at.desc()))
    rows = list((await conn.execute(q)).all())
    seen: set[str] = set()
    latest = []
    for r in rows:  # a re-run replaces earlier versions of the same path
        if r.path not in seen:
            seen.add(r.path)
            latest.append(r)
    return latest


async def file_versions(
    conn: AsyncConnection, subtask_id: uuid.UUID, target_id: uuid.UUID | None, path: str
) -> list[sa.Row[Any]]:
    """Every recorded version of `path` in one piece of work, newest first: the subtask's own,
    and those of the subtask it serves (`target_id`) and of that one's other quality steps (a
    correction rewrites its target's files)."""
    subtasks = table_of(Subtask)
    work = target_id or subtask_id
    members = sa.select(subtasks.c.id).where(
        sa.or_(subtasks.c.id == work, subtasks.c.target_id == work))
    q = (sa.select(artifacts)
         .where(artifacts.c.subtask_id.in_(members), artifacts.c.path == path)
         .order_by(artifacts.c.created_at.desc()))
    return list((await conn.execute(q)).all())


async def task_files(conn: AsyncConnection, task_id: uuid.UUID) -> list[sa.Row[Any]]:
    """Every file of every subtask of a task (latest version per subtask and path), but the
    search indexes its steps passed on (`CACHE_PREFIX`)."""
    q = (sa.select(artifacts, table_of(Subtask).c.key, table_of(Subtask).c.name)
         .join(table_of(Subtask), table_of(Subtask).c.id == artifacts.c.subtask_id)
         .where(artifacts.c.task_id == task_id, ~artifacts.c.path.startswith(CACHE_PREFIX))
         .order_by(artifacts.c.created_at))
    latest: dict[tuple[uuid.UUID, str], sa.Row[Any]] = {}
    for r in (await conn.execute(q)).all():
        latest[(r.subtask_id, r.path)] = r
    return list(latest.values())


async def newest_version(conn: AsyncConnection, task_id: uuid.UUID, path: str) -> str | None:
    """The content hash of the newest version of file `path` among a task's files."""
    q = (sa.select(artifacts.c.sha256)
         .where(artifacts.c.task_id == task_id, artifacts.c.path == path)
         .order_by(artifacts.c.created_at.desc()).limit(1))
    found = (await conn.execute(q)).scalar()
    return str(found) if found is not None else None
