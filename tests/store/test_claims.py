"""Claims give each unfinished task to one control-plane copy, until its claim runs out."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from shoal.engine.model import TaskRecord
from shoal.states import TaskStatus
from shoal.store import accounts
from shoal.store.claims import claim_of, claim_tasks, release_claims, renew_claims
from shoal.store.convert import tasks
from shoal.store.db import Database
from shoal.store.state import insert_task_sync
from tests.store.plans import migrated_sqlite, plans_of

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
TTL = 30.0
LATER = NOW + timedelta(seconds=TTL + 1)  # every claim made at NOW has expired


async def stored_tasks(
    db: Database, *statuses: TaskStatus, owner: str | None = None
) -> list[uuid.UUID]:
    """A user and one task per status (oldest first), unclaimed unless `owner` is given."""
    async with db.begin() as conn:
        user_id = await accounts.create_user(
            conn, username=f"u{uuid.uuid4().hex[:8]}", password_hash="x", is_admin=False,
            email=None, now=NOW)
    records = [TaskRecord(id=uuid.uuid4(), user_id=user_id, description=f"task {i}",
                          status=status, created_at=NOW + timedelta(milliseconds=i),
                          updated_at=NOW)
               for i, status in enumerate(statuses)]

    def insert(conn: sa.Connection) -> None:
        for task in records:
            insert_task_sync(conn, task, owner=owner,
                             owner_expires_at=NOW + timedelta(seconds=TTL) if owner else None)

    await db.run_write(insert)
    return [t.id for t in records]


async def claim(db: Database, owner: str, at: datetime = NOW, **kw: object) -> list[uuid.UUID]:
    return await db.run_write(lambda conn: claim_tasks(conn, owner, now=at, ttl=TTL, **kw))


async def owners(db: Database) -> dict[uuid.UUID, tuple[str | None, datetime | None]]:
    async with db.connection() as conn:
        rows = (await conn.execute(
            sa.select(tasks.c.id, tasks.c.owner_id, tasks.c.owner_expires_at))).all()
    return {r.id: (r.owner_id, r.owner_expires_at) for r in rows}


async def test_claim_takes_unfinished_unowned_tasks_and_skips_finished_ones(db: Database) -> None:
    """Unowned unfinished tasks go to the caller until now + ttl; ended tasks stay unowned."""
    pending, running, done, cancelled = await stored_tasks(
        db, TaskStatus.PENDING, TaskStatus.IN_PROGRESS, TaskStatus.COMPLETED,
        TaskStatus.CANCELLED)
    assert sorted(await claim(db, "a")) == sorted([pending, running])
    until = NOW + timedelta(seconds=TTL)
    assert await owners(db) == {pending: ("a", until), running: ("a", until),
                                done: (None, None), cancelled: (None, None)}


async def test_live_claim_keeps_another_copy_out_until_it_expires(db: Database) -> None:
    """A second copy gets nothing while the first copy's claim lasts, and everything after."""
    ids = await stored_tasks(db, TaskStatus.PENDING, TaskStatus.CHECKPOINT)
    await claim(db, "a")
    assert await claim(db, "b", NOW + timedelta(seconds=TTL - 1)) == []
    assert sorted(await claim(db, "b", LATER)) == sorted(ids)
    assert {owner for owner, _ in (await owners(db)).values()} == {"b"}


async def test_claim_keeps_what_the_caller_already_holds(db: Database) -> None:
    """A copy that claims again (say, restarted under the same id) keeps its tasks, renewed."""
    ids = await stored_tasks(db, TaskStatus.PENDING, owner="a")
    assert await claim(db, "a", NOW + timedelta(seconds=5)) == ids
    assert (await owners(db))[ids[0]] == ("a", NOW + timedelta(seconds=TTL + 5))


async def test_claim_respects_limit_oldest_first_and_task_ids(db: Database) -> None:
    """`limit` takes the oldest tasks first; `task_ids` restricts the claim to those tasks."""
    first, second, third = await stored_tasks(db, *[TaskStatus.PENDING] * 3)
    assert sorted(await claim(db, "a", limit=2)) == sorted([first, second])
    assert await claim(db, "b", task_ids=[first, third]) == [third]


async def test_task_inserted_with_an_owner_is_held_by_it(db: Database) -> None:
    """A task stored claimed by the copy that created it is not another copy's to take."""
    (tid,) = await stored_tasks(db, TaskStatus.PENDING, owner="a")
    assert await claim(db, "b") == []
    async with db.connection() as conn:
        held = await conn.run_sync(claim_of, tid)
    assert held is not None
    assert held.owner == "a"
    assert held.held_by_other("b", NOW)
    assert not held.held_by_other("a", NOW)
    assert not held.held_by_other("b", LATER)


async def test_renew_returns_only_tasks_still_held(db: Database) -> None:
    """Renewal extends the claims a copy still holds and leaves out those taken over."""
    kept, lost, _done = await stored_tasks(
        db, TaskStatus.PENDING, TaskStatus.PENDING, TaskStatus.COMPLETED, owner="a")
    assert await claim(db, "b", LATER, task_ids=[lost]) == [lost]
    renewed = await db.run_write(lambda conn: renew_claims(conn, "a", now=LATER, ttl=TTL))
    assert renewed == {kept}
    assert (await owners(db))[kept] == ("a", LATER + timedelta(seconds=TTL))


async def test_release_frees_the_tasks_for_another_copy_at_once(db: Database) -> None:
    """After a graceful release another copy claims the tasks without waiting for expiry."""
    ids = await stored_tasks(db, TaskStatus.PENDING, TaskStatus.IN_PROGRESS, owner="a")
    assert await db.run_write(lambda conn: release_claims(conn, "a")) == 2
    assert {o for o, _ in (await owners(db)).values()} == {None}
    assert sorted(await claim(db, "b")) == sorted(ids)


@pytest.mark.postgres
async def test_concurrent_claims_skip_each_others_locked_tasks(pg_db: Database) -> None:
    """While one claim's transaction is open, a parallel claim takes the other tasks, unblocked."""
    ids = await stored_tasks(pg_db, *[TaskStatus.PENDING] * 6)
    async with pg_db.engine.connect() as first, pg_db.engine.connect() as second:
        await first.begin()
        took_a = await first.run_sync(
            lambda conn: claim_tasks(conn, "a", now=NOW, ttl=TTL, limit=3))
        await second.begin()
        # Blocking on the first transaction's locks would fail here instead of hanging.
        await second.execute(sa.text("SET LOCAL lock_timeout = '2s'"))
        took_b = await asyncio.wait_for(
            second.run_sync(lambda conn: claim_tasks(conn, "b", now=NOW, ttl=TTL)), 10)
        await second.commit()
        await first.commit()
    assert sorted(took_a) == sorted(ids[:3])
    assert sorted(took_b) == sorted(ids[3:])
    assert {tid: o for tid, (o, _) in (await owners(pg_db)).items()} == {
        **dict.fromkeys(ids[:3], "a"), **dict.fromkeys(ids[3:], "b")}


async def test_a_renewal_reads_the_unfinished_tasks_only(tmp_path: Path) -> None:
    """The claims a copy renews and takes every `claim_interval` come from the index of
    unfinished tasks, a few among all tasks ever, on SQLite too: ordered by `created_at` (which
    only a `limit` needs), SQLite read every task through that column's index instead, a
    renewal growing with the history."""
    url = await migrated_sqlite(tmp_path / "plans.db")
    plans = await plans_of(url, lambda conn: conn.run_sync(lambda sync: (
        claim_tasks(sync, "a", now=NOW, ttl=TTL), renew_claims(sync, "a", now=NOW, ttl=TTL))))
    assert len(plans) == 2
    for plan in plans:
        assert "USING INDEX ix_tasks_unfinished_owner" in plan, plan
        assert "ix_tasks_created_at" not in plan, plan
