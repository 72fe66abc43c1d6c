"""Workflow documents users added: every version kept, each seen only by its owner."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from shoal.errors import Conflict
from shoal.store.models import UserWorkflow, table_of

user_workflows = table_of(UserWorkflow)


async def add(conn: AsyncConnection, *, user_id: uuid.UUID, name: str, version: int,
              text: str, now: datetime) -> None:
    """Store a version; one the user has already is a `Conflict`."""
    try:
        async with conn.begin_nested():
            await conn.execute(sa.insert(user_workflows).values(
                id=uuid.uuid4(), user_id=user_id, name=name, version=version, text=text,
                created_at=now))
    except IntegrityError as exc:
        raise Conflict(f"You have version {version} of '{name}' already; raise `version`.",
                       code="version_exists") from exc


async def latest(conn: AsyncConnection, user_id: uuid.UUID,
                 name: str | None = None) -> list[sa.Row[Any]]:
    """The newest version of each of the user's workflows (or of the one named), by name."""
    q = sa.select(user_workflows).where(user_workflows.c.user_id == user_id)
    if name is not None:
        q = q.where(user_workflows.c.name == name)
    newest: dict[str, sa.Row[Any]] = {}
    for row in (await conn.execute(q.order_by(user_workflows.c.name,
                                              user_workflows.c.version))).all():
        newest[row.name] = row
    return list(newest.values())


async def remove(conn: AsyncConnection, user_id: uuid.UUID, name: str) -> int:
    """Delete every version of the user's workflow `name`; how many there were."""
    done = await conn.execute(sa.delete(user_workflows).where(
        user_workflows.c.user_id == user_id, user_workflows.c.name == name))
    return int(done.rowcount or 0)
