"""Administrative actions shared by the CLI, `shoal up` and tests: users and worker tokens."""

from __future__ import annotations

import uuid
from datetime import timedelta

from shoal.auth.passwords import hash_password_async
from shoal.auth.tokens import new_opaque_token
from shoal.config import Settings
from shoal.store import accounts
from shoal.store.db import Database
from shoal.store.models import utcnow


async def create_user(
    db: Database, settings: Settings, *, username: str, password: str, admin: bool = False,
    email: str | None = None,
) -> uuid.UUID:
    """Add an account; `Conflict` if the name is taken."""
    hashed = await hash_password_async(password, rounds=settings.bcrypt_rounds)
    async with db.begin() as conn:
        return await accounts.create_user(conn, username=username, password_hash=hashed,
                                          is_admin=admin, email=email, now=utcnow())


async def ensure_user(
    db: Database, settings: Settings, *, username: str, password: str, admin: bool = False
) -> uuid.UUID:
    """The id of `username`, creating the account if it does not exist."""
    async with db.connection() as conn:
        row = await accounts.user_by_name(conn, username)
    if row is not None:
        return uuid.UUID(str(row.id))
    return await create_user(db, settings, username=username, password=password, admin=admin)


async def create_worker_token(db: Database, *, name: str, user_id: uuid.UUID | None = None) -> str:
    """A new worker token (the secret; only its hash is stored)."""
    token, digest = new_opaque_token("shw_")
    async with db.begin() as conn:
        await accounts.add_token(conn, kind="worker", name=name, token_hash=digest,
                                 user_id=user_id, now=utcnow())
    return token


async def create_login_link_token(
    db: Database, *, user_id: uuid.UUID, minutes: int = 60 * 24
) -> str:
    """A one-time token for a login link (exchanged at /api/v1/auth/exchange)."""
    token, digest = new_opaque_token("shl_")
    now = utcnow()
    async with db.begin() as conn:
        await accounts.add_token(conn, kind="login", name="login link", token_hash=digest,
                                 user_id=user_id, now=now,
                                 expires_at=now + timedelta(minutes=minutes))
    return token
