"""Users, opaque tokens (worker credentials, one-time login links) and refresh-token families.

A refresh token is used once. Signing in starts a family; each refresh uses up the token it
is given (a conditional UPDATE: of two refreshes with one token, exactly one changes the
row) and issues the next in the same family. A token presented after its use — by whoever
copied it, or by its owner after the copy was used — revokes the whole family, in the same
transaction, so both must sign in again. Validity is read from the family's row, so a token
issued by a refresh racing the revocation is dead too."""

from __future__ import annotations

import enum
import uuid
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from shoal.errors import Conflict
from shoal.store.models import ApiToken, RefreshFamily, RefreshToken, User, table_of

users = table_of(User)
tokens = table_of(ApiToken)
families = table_of(RefreshFamily)
refresh_tokens = table_of(RefreshToken)

SWEEP_BATCH = 500
"""Expired refresh families deleted, at most, per sign-in (the sweep rides on sign-ins)."""


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


class Refreshed(enum.Enum):
    """What became of a refresh token presented for rotation."""

    ROTATED = "rotated"  # used up now; the next token is stored in its family
    UNKNOWN = "unknown"  # never issued (or its family was swept, or another user's)
    REUSED = "reused"  # used before: its family is revoked by this call
    REVOKED = "revoked"  # its family was revoked earlier
    EXPIRED = "expired"


async def start_refresh_family(
    conn: AsyncConnection, *, user_id: uuid.UUID, jti: str, expires_at: datetime,
    now: datetime,
) -> uuid.UUID:
    """Store a sign-in's first refresh token in a new family; also delete up to
    `SWEEP_BATCH` expired families (of anyone), with their tokens."""
    family_id = uuid.uuid4()
    await conn.execute(sa.insert(families).values(
        id=family_id, user_id=user_id, created_at=now, expires_at=expires_at))
    await conn.execute(sa.insert(refresh_tokens).values(
        jti=jti, family_id=family_id, user_id=user_id, issued_at=now, expires_at=expires_at))
    await sweep_refresh_families(conn, now=now)
    return family_id


async def rotate_refresh_token(
    conn: AsyncConnection, *, jti: str, user_id: uuid.UUID, next_jti: str,
    next_expires_at: datetime, now: datetime,
) -> Refreshed:
    """Use up the refresh token `jti` of `user_id` and store `next_jti` in its family.

    Anything but `ROTATED` means the caller must refuse the refresh, after committing: a
    `REUSED` token has revoked its family in this transaction. The first statement is the
    conditional UPDATE, so that on PostgreSQL a second refresh with the same token waits for
    the first one's row lock and then finds the token used, and on SQLite it waits for the
    write lock and then reads what the first one committed.
    """
    live_families = sa.select(families.c.id).where(
        families.c.user_id == user_id, families.c.revoked_at.is_(None))
    used = await conn.execute(sa.update(refresh_tokens).where(
        refresh_tokens.c.jti == jti, refresh_tokens.c.user_id == user_id,
        refresh_tokens.c.used_at.is_(None), refresh_tokens.c.expires_at > now,
        refresh_tokens.c.family_id.in_(live_families),
    ).values(used_at=now))
    row = (await conn.execute(
        sa.select(refresh_tokens.c.family_id, refresh_tokens.c.user_id,
                  refresh_tokens.c.used_at, families.c.revoked_at,
                  families.c.expires_at.label("family_expires_at"))
        .join(families, families.c.id == refresh_tokens.c.family_id)
        .where(refresh_tokens.c.jti == jti))).first()
    if used.rowcount == 1 and row is not None:
        # Conditional too: a reuse that revoked the family while this waited for its row
        # wins, and the token stored below is born dead.
        kept = await conn.execute(sa.update(families).where(
            families.c.id == row.family_id, families.c.revoked_at.is_(None),
        ).values(expires_at=max(row.family_expires_at, next_expires_at)))
        if not kept.rowcount:
            return Refreshed.REVOKED
        await conn.execute(sa.insert(refresh_tokens).values(
            jti=next_jti, family_id=row.family_id, user_id=user_id, issued_at=now,
            expires_at=next_expires_at))
        # The family's expired tokens: one past its life is refused by its signature's
        # expiry already, so its row tells nothing more.
        await conn.execute(sa.delete(refresh_tokens).where(
            refresh_tokens.c.family_id == row.family_id, refresh_tokens.c.expires_at <= now))
        return Refreshed.ROTATED
    if row is None or row.user_id != user_id:
        return Refreshed.UNKNOWN
    if row.revoked_at is not None:
        return Refreshed.REVOKED
    if row.used_at is not None:
        await revoke_refresh_family(conn, row.family_id, now=now, reason="reuse")
        return Refreshed.REUSED
    return Refreshed.EXPIRED


async def revoke_refresh_family(
    conn: AsyncConnection, family_id: uuid.UUID, *, now: datetime, reason: str,
) -> bool:
    """End every refresh token of a family; False if it was unknown or revoked already."""
    result = await conn.execute(sa.update(families).where(
        families.c.id == family_id, families.c.revoked_at.is_(None),
    ).values(revoked_at=now, revoked_reason=reason))
    return bool(result.rowcount)


async def sweep_refresh_families(conn: AsyncConnection, *, now: datetime) -> int:
    """Delete up to `SWEEP_BATCH` families whose every token has expired, with their tokens;
    how many. Rows another sign-in is sweeping at the moment are skipped (PostgreSQL), so
    two sweeps never wait on, or deadlock with, each other."""
    ids = list((await conn.execute(
        sa.select(families.c.id).where(families.c.expires_at <= now)
        .order_by(families.c.expires_at).limit(SWEEP_BATCH)
        .with_for_update(skip_locked=True))).scalars())
    if not ids:
        return 0
    await conn.execute(sa.delete(refresh_tokens).where(refresh_tokens.c.family_id.in_(ids)))
    await conn.execute(sa.delete(families).where(families.c.id.in_(ids)))
    return len(ids)
