"""Users and opaque tokens (worker credentials, one-time login links)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from shoal.errors import Conflict
from shoal.store.models import ApiToken, User, table_of

users = table_of(User)
tokens = table_of(ApiToken)


async def create_user(
    conn: AsyncConnection, *, username: str, password_hash: str, is_admin: bool,
    email: str | None, now: datetime,
) -> uuid.UUID:
    """Add a user; a taken username or email is a `Conflict`."""
    user_id = uuid.uuid4()
    try:
        async with conn.begin_nested():
            await conn.execute(sa.insert(users).values(
                id=user_id, username=username, email=email, password_hash=password_hash,
                is_admin=is_admin, created_at=now,
            ))
    except IntegrityError as exc:
        raise Conflict(f"The username {username!r} (or that email) is already taken.",
                       code="user_exists") from exc
    return user_id


async def user_by_name(conn: AsyncConnection, username: str) -> sa.Row[Any] | None:
    """A user by username."""
    return (await conn.execute(sa.select(users).where(users.c.username == username))).first()


async def user_by_id(conn: AsyncConnection, user_id: uuid.UUID) -> sa.Row[Any] | None:
    """A user by id."""
    return (await conn.execute(sa.select(users).where(users.c.id == user_id))).first()


async def list_users(conn: AsyncConnection) -> list[sa.Row[Any]]:
    """All users, oldest first."""
    return list((await conn.execute(sa.select(users).order_by(users.c.created_at))).all())


async def touch_login(conn: AsyncConnection, user_id: uuid.UUID, now: datetime) -> None:
    """Record a successful login."""
    await conn.execute(sa.update(users).where(users.c.id == user_id).values(last_login=now))


async def add_token(
    conn: AsyncConnection, *, kind: str, name: str, token_hash: str, user_id: uuid.UUID | None,
    now: datetime, expires_at: datetime | None = None,
) -> uuid.UUID:
    """Store an opaque token by its hash."""
    token_id = uuid.uuid4()
    await conn.execute(sa.insert(tokens).values(
        id=token_id, kind=kind, name=name, token_hash=token_hash, user_id=user_id,
        created_at=now, expires_at=expires_at,
    ))
    return token_id


async def live_token(
    conn: AsyncConnection, *, kind: str, token_hash: str, now: datetime
) -> sa.Row[Any] | None:
    """A token of `kind` with this hash that is neither revoked nor expired."""
    row = (await conn.execute(sa.select(tokens).where(
        tokens.c.token_hash == token_hash, tokens.c.kind == kind,
        tokens.c.revoked_at.is_(None),
    ))).first()
    if row is None or (row.expires_at is not None and row.expires_at <= now):
        return None
    return row


async def use_token(conn: AsyncConnection, token_id: uuid.UUID, now: datetime) -> None:
    """Record a token's use."""
    await conn.execute(sa.update(tokens).where(tokens.c.id == token_id).values(last_used_at=now))


async def revoke_token(conn: AsyncConnection, token_id: uuid.UUID, now: datetime) -> bool:
    """Revoke a token; False if it was unknown or already revoked."""
    result = await conn.execute(sa.update(tokens).where(
        tokens.c.id == token_id, tokens.c.revoked_at.is_(None)).values(revoked_at=now))
    return bool(result.rowcount)


async def list_tokens(conn: AsyncConnection, *, kind: str) -> list[sa.Row[Any]]:
    """Tokens of one kind, newest first."""
    q = sa.select(tokens).where(tokens.c.kind == kind).order_by(tokens.c.created_at.desc())
    return list((await conn.execute(q)).all())
