"""The refresh-token store on its own: each outcome of a rotation, with a clock the test
sets, and on PostgreSQL the races between transactions, driven step by step (the second
waits on the first's row lock, as `pg_stat_activity` shows, before the first commits)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa

from shoal.store import accounts
from shoal.store.accounts import Refreshed
from shoal.store.db import Database
from tests.runtime.harness import wait_until

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
LIFE = timedelta(days=30)


async def user(db: Database, name: str = "ada") -> uuid.UUID:
    async with db.begin() as conn:
        return await accounts.create_user(conn, username=name, password_hash="x",
                                          is_admin=False, email=None, now=NOW)


async def family(db: Database, uid: uuid.UUID, jti: str, at: datetime = NOW) -> uuid.UUID:
    async with db.begin() as conn:
        return await accounts.start_refresh_family(conn, user_id=uid, jti=jti,
                                                   expires_at=at + LIFE, now=at)


async def rotate(db: Database, uid: uuid.UUID, jti: str, nxt: str,
                 at: datetime = NOW) -> Refreshed:
    async with db.begin() as conn:
        return await accounts.rotate_refresh_token(conn, jti=jti, user_id=uid, next_jti=nxt,
                                                   next_expires_at=at + LIFE, now=at)


async def jtis(db: Database) -> set[str]:
    async with db.connection() as conn:
        return set((await conn.execute(sa.select(accounts.refresh_tokens.c.jti))).scalars())


async def test_rotation_outcomes(db: Database) -> None:
    """Rotated once; then reused (revoking); then revoked for every token of the family;
    unknown for a jti never stored or another user's; expired past its life."""
    ada, bob = await user(db, "ada"), await user(db, "bob")
    await family(db, ada, "a1")
    assert await rotate(db, ada, "a1", "a2") is Refreshed.ROTATED
    assert await rotate(db, ada, "a2", "a3", NOW + timedelta(hours=1)) is Refreshed.ROTATED
    assert await rotate(db, bob, "a3", "b9") is Refreshed.UNKNOWN  # not bob's
    assert await rotate(db, ada, "nope", "a9") is Refreshed.UNKNOWN
    assert await rotate(db, ada, "a1", "a4") is Refreshed.REUSED
    for jti in ("a1", "a2", "a3"):
        assert await rotate(db, ada, jti, f"x-{jti}") is Refreshed.REVOKED
    await family(db, bob, "b1")
    assert await rotate(db, bob, "b1", "b2", NOW + LIFE) is Refreshed.EXPIRED
    assert await jtis(db) == {"a1", "a2", "a3", "b1"}  # nothing stored for a refusal


async def test_the_family_lives_as_long_as_its_newest_token(db: Database) -> None:
    """Each rotation moves the family's expiry to its newest token's; a sweep before that
    leaves it, a sweep past it removes the family and its tokens."""
    ada = await user(db)
    fam = await family(db, ada, "a1")
    later = NOW + timedelta(days=20)
    assert await rotate(db, ada, "a1", "a2", later) is Refreshed.ROTATED
    async with db.begin() as conn:
        assert await accounts.sweep_refresh_families(conn, now=NOW + LIFE) == 0
        expires = (await conn.execute(sa.select(accounts.families.c.expires_at)
                                      .where(accounts.families.c.id == fam))).scalar_one()
        assert expires == later + LIFE
        assert await accounts.sweep_refresh_families(conn, now=later + LIFE) == 1
    assert await jtis(db) == set()


def waiting_on_a_lock(db: Database) -> Callable[[], Awaitable[bool]]:
    """Whether some connection to `db`'s database waits on a lock right now."""
    async def check() -> bool:
        async with db.connection() as conn:
            return bool((await conn.execute(sa.text(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND datname = current_database()"))).scalar_one())
    return check


async def test_two_rotations_of_one_token_on_postgres(pg_db: Database) -> None:
    """A rotates the token and holds its row; B, rotating the same token, waits on A's lock
    (the conditional UPDATE). A commits: B's UPDATE finds the token used and changes
    nothing, so B is a reuse and revokes the family, A's new token with it."""
    ada = await user(pg_db)
    await family(pg_db, ada, "t1")
    first = await pg_db.engine.connect()
    try:
        a = await first.begin()
        assert await accounts.rotate_refresh_token(
            first, jti="t1", user_id=ada, next_jti="t2-a", next_expires_at=NOW + LIFE,
            now=NOW) is Refreshed.ROTATED
        b = asyncio.create_task(rotate(pg_db, ada, "t1", "t2-b"))
        await wait_until(waiting_on_a_lock(pg_db), what="B to wait on A's row lock", within=10)
        assert not b.done()
        await a.commit()
        assert await b is Refreshed.REUSED
    finally:
        await first.close()
    assert await rotate(pg_db, ada, "t2-a", "t3") is Refreshed.REVOKED
    assert await jtis(pg_db) == {"t1", "t2-a"}


async def test_a_rotation_racing_a_revocation_on_postgres(pg_db: Database) -> None:
    """The thief rotates the newest token while the victim's reuse of an older one revokes
    the family (waiting on the family's row the thief's rotation holds): the token the thief
    was given is dead once both commit."""
    ada = await user(pg_db)
    await family(pg_db, ada, "t1")
    assert await rotate(pg_db, ada, "t1", "t2") is Refreshed.ROTATED
    thief = await pg_db.engine.connect()
    try:
        t = await thief.begin()
        assert await accounts.rotate_refresh_token(
            thief, jti="t2", user_id=ada, next_jti="t3", next_expires_at=NOW + LIFE,
            now=NOW) is Refreshed.ROTATED
        victim = asyncio.create_task(rotate(pg_db, ada, "t1", "v2"))
        await wait_until(waiting_on_a_lock(pg_db), what="the victim to wait", within=10)
        await t.commit()
        assert await victim is Refreshed.REUSED
    finally:
        await thief.close()
    assert await rotate(pg_db, ada, "t3", "t4") is Refreshed.REVOKED


async def test_a_revocation_committed_while_a_rotation_waits_on_postgres(
    pg_db: Database
) -> None:
    """The other order: the victim's revocation holds the family's row when the thief's
    rotation comes to move the family's expiry; the thief waits, then finds the family
    revoked and is refused."""
    ada = await user(pg_db)
    fam = await family(pg_db, ada, "t1")
    assert await rotate(pg_db, ada, "t1", "t2") is Refreshed.ROTATED
    victim = await pg_db.engine.connect()
    try:
        v = await victim.begin()
        assert await accounts.revoke_refresh_family(victim, fam, now=NOW, reason="reuse")
        thief = asyncio.create_task(rotate(pg_db, ada, "t2", "t3"))
        await wait_until(waiting_on_a_lock(pg_db), what="the thief to wait", within=10)
        await v.commit()
        assert await thief is Refreshed.REVOKED
    finally:
        await victim.close()
