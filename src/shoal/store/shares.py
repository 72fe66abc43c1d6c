"""Share links: a public, read-only link to a task's report. Only a hash of the token is kept,
so the link cannot be shown again, and a leaked database does not open it."""

from __future__ import annotations

import hashlib
import secrets
import uuid
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from shoal.store.models import Share, Task, table_of

shares = table_of(Share)
tasks = table_of(Task)
PREFIX = "shs_"  # so that logs mask it (`shoal.logs`), as worker and login tokens


def new_token() -> str:
    """An unguessable token: 256 random bits."""
    return PREFIX + secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    """What is stored of a token."""
    return hashlib.sha256(token.encode()).hexdigest()


async def create(conn: AsyncConnection, *, task_id: uuid.UUID, user_id: uuid.UUID,
                 token: str, now: datetime) -> sa.Row[Any]:
    """A share of `task_id` by `user_id` opened by `token`."""
    row = {"id": uuid.uuid4(), "task_id": task_id, "user_id": user_id,
           "token_hash": token_hash(token), "created_at": now}
    await conn.execute(sa.insert(shares).values(row))
    return (await conn.execute(sa.select(shares).where(shares.c.id == row["id"]))).one()


async def of_task(conn: AsyncConnection, task_id: uuid.UUID) -> list[sa.Row[Any]]:
    """A task's shares, oldest first."""
    return list((await conn.execute(sa.select(shares).where(shares.c.task_id == task_id)
                                    .order_by(shares.c.created_at))).all())


async def revoke(conn: AsyncConnection, *, task_id: uuid.UUID, share_id: uuid.UUID) -> bool:
    """Remove a share of `task_id`; False if it has no such share."""
    done = await conn.execute(sa.delete(shares).where(shares.c.id == share_id,
                                                      shares.c.task_id == task_id))
    return done.rowcount > 0


async def opened_by(conn: AsyncConnection, token: str, *, now: datetime) -> sa.Row[Any] | None:
    """The task a token opens (its row), noting the use; None for an unknown or revoked one."""
    if not token.startswith(PREFIX) or len(token) > 100:
        return None
    digest = token_hash(token)
    found = (await conn.execute(
        sa.select(tasks).join(shares, shares.c.task_id == tasks.c.id)
        .where(shares.c.token_hash == digest))).first()
    if found is not None:
        await conn.execute(sa.update(shares).where(shares.c.token_hash == digest)
                           .values(last_used_at=now))
    return found
