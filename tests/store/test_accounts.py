"""Users and opaque tokens: unique names, tokens found by hash only while live."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from shoal.errors import Conflict
from shoal.store import accounts
from shoal.store.db import Database

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


async def add(db: Database, token_hash: str, expires_at: datetime | None = None) -> uuid.UUID:
    async with db.begin() as conn:
        return await accounts.add_token(
            conn,
            kind="worker",
            name="w1",
            token_hash=token_hash,
            user_id=None,
            now=NOW,
            expires_at=expires_at,
        )


async def live(
    db: Database, token_hash: str, *, kind: str = "worker", at: datetime = NOW
) -> sa.Row[Any] | None:
    async with db.connection() as conn:
        return await accounts.live_token(conn, kind=kind, token_hash=token_hash, now=at)


async def test_duplicate_username_is_a_conflict(db: Database) -> None:
    """A taken username raises Conflict and leaves the transaction usable."""
    async with db.begin() as conn:
        await accounts.create_user(
            conn, username="alice", password_hash="x", is_admin=False, email=None, now=NOW
        )
        with pytest.raises(Conflict) as caught:
            await accounts.create_user(
                conn, username="alice", password_hash="y", is_admin=True, email=None, now=NOW
            )
        await accounts.create_user(
            conn, username="bob", password_hash="z", is_admin=False, email=None, now=NOW
        )
    assert caught.value.code == "user_exists"
    async with db.connection() as conn:
        assert [u.username for u in await accounts.list_users(conn)] == ["alice", "bob"]


async def test_token_is_found_by_hash_and_kind(db: Database) -> None:
    """A token is found by its hash and kind; another hash or kind finds nothing."""
    token_id = await add(db, "a" * 64)
    found = await live(db, "a" * 64)
    assert found is not None
    assert found.id == token_id
    assert await live(db, "b" * 64) is None
    assert await live(db, "a" * 64, kind="login") is None


async def test_revoked_token_is_not_live(db: Database) -> None:
    """Once revoked a token is no longer live, and revoking it again reports False."""
    token_id = await add(db, "a" * 64)
    async with db.begin() as conn:
        assert await accounts.revoke_token(conn, token_id, NOW)
        assert not await accounts.revoke_token(conn, token_id, NOW)
    assert await live(db, "a" * 64) is None


async def test_expired_token_is_not_live(db: Database) -> None:
    """A token is live until its expiry time and not from then on."""
    await add(db, "a" * 64, expires_at=NOW + timedelta(minutes=5))
    assert await live(db, "a" * 64, at=NOW + timedelta(minutes=4)) is not None
    assert await live(db, "a" * 64, at=NOW + timedelta(minutes=5)) is None
