"""Uploads: the files users bring for their tasks (sources), and which task reads which."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from shoal.errors import Conflict, NotFound
from shoal.store.models import TaskSource, Upload, table_of

uploads = table_of(Upload)
task_sources = table_of(TaskSource)


async def add(conn: AsyncConnection, rows: Sequence[dict[str, Any]]) -> None:
    """Record uploads (each a dict of the `uploads` columns)."""
    if rows:
        await conn.execute(sa.insert(uploads), list(rows))


async def total_size(conn: AsyncConnection, user_id: uuid.UUID) -> int:
    """How many bytes `user_id`'s uploads hold."""
    found = await conn.execute(sa.select(sa.func.coalesce(sa.func.sum(uploads.c.size), 0))
                               .where(uploads.c.user_id == user_id))
    return int(found.scalar() or 0)


async def of_user(conn: AsyncConnection, user_id: uuid.UUID,
                  ids: Sequence[uuid.UUID] | None = None) -> list[sa.Row[Any]]:
    """`user_id`'s uploads (those of `ids`, when given), oldest first."""
    q = sa.select(uploads).where(uploads.c.user_id == user_id)
    if ids is not None:
        q = q.where(uploads.c.id.in_(list(ids)))
    return list((await conn.execute(q.order_by(uploads.c.created_at, uploads.c.id))).all())


async def readers(conn: AsyncConnection, upload_id: uuid.UUID) -> list[uuid.UUID]:
    """The tasks that read an upload."""
    return list((await conn.execute(sa.select(task_sources.c.task_id)
                                    .where(task_sources.c.upload_id == upload_id))).scalars())


async def remove(conn: AsyncConnection, user_id: uuid.UUID, upload_id: uuid.UUID) -> sa.Row[Any]:
    """Delete an upload of `user_id`'s that no task reads; the row it was. `NotFound` for an
    upload that is not theirs, whatever reads it (so nobody learns of another's upload or of
    their tasks), then `Conflict` while a task of theirs reads it."""
    pick = sa.select(uploads).where(uploads.c.id == upload_id, uploads.c.user_id == user_id)
    if conn.dialect.name == "postgresql":
        # A task linked to it meanwhile is seen below, or waits for this delete to end:
        # never does the delete cascade through a link made after the check.
        pick = pick.with_for_update()
    row = (await conn.execute(pick)).first()
    if row is None:
        raise NotFound(f"No upload {upload_id}.")
    if found := await readers(conn, upload_id):
        raise Conflict(f"Task(s) {', '.join(map(str, found[:5]))} read this upload; "
                       "delete them first.", code="upload_in_use")
    await conn.execute(sa.delete(uploads).where(uploads.c.id == upload_id))
    return row


def link_rows(task_id: uuid.UUID,
              sources: Sequence[tuple[uuid.UUID, str]]) -> list[dict[str, Any]]:
    """The `task_sources` rows of a task reading `sources` ((upload id, name) pairs)."""
    return [{"task_id": task_id, "upload_id": upload_id, "name": name}
            for upload_id, name in sources]
