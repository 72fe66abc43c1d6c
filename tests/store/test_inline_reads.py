"""SQLite reads on the loop's own thread (ADR 0047): each block its own connection, results
that outlive their block, as many readers at once as there are blocks, and never a wait on
the writer."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from shoal.store.db import Database
from shoal.store.inline_reads import KEPT, READ_BUSY_TIMEOUT_MS, InlineConnection

DEADLINE = 10.0


@pytest.fixture
async def sqlite_db(tmp_path: Path) -> AsyncIterator[Database]:
    db = Database.connect(f"sqlite+aiosqlite:///{tmp_path / 'r.db'}")
    await db.run_write(lambda conn: conn.exec_driver_sql("CREATE TABLE t (x INTEGER)"))
    try:
        yield db
    finally:
        await db.dispose()


async def _add(db: Database, value: int) -> None:
    await db.run_write(lambda conn: conn.exec_driver_sql("INSERT INTO t (x) VALUES (?)",
                                                         (value,)))


async def _count(conn: InlineConnection) -> int:
    return int((await conn.execute(sa.text("SELECT count(*) FROM t"))).scalar_one())


async def test_a_read_runs_on_the_loop_thread_without_suspending(sqlite_db: Database) -> None:
    await _add(sqlite_db, 1)
    seen: list[str] = []

    def where(conn: sa.Connection) -> int:
        seen.append(threading.current_thread().name)
        return int(conn.exec_driver_sql("SELECT x FROM t").scalar_one())

    async with sqlite_db.connection() as conn:
        assert isinstance(conn, InlineConnection)
        read = conn.run_sync(where)
        # A coroutine that never suspends finishes at its first `send`: no hop to a thread.
        with pytest.raises(StopIteration) as done:
            read.send(None)
    assert done.value.value == 1
    assert seen == [threading.current_thread().name]


async def test_a_result_outlives_its_block(sqlite_db: Database) -> None:
    for value in (3, 1, 2):
        await _add(sqlite_db, value)
    async with sqlite_db.connection() as conn:
        rows = await conn.execute(sa.text("SELECT x FROM t ORDER BY x"))
        scalars = await conn.scalars(sa.text("SELECT x FROM t ORDER BY x DESC"))
    assert [r.x for r in rows] == [1, 2, 3]
    assert scalars.all() == [3, 2, 1]


async def test_overlapping_blocks_have_their_own_connections(sqlite_db: Database) -> None:
    """Two blocks open at once are two connections: the inner one's end (its connection back
    in the pool, rolled back) leaves the outer one reading, and each read sees what was
    committed before it, as the async driver's did (pysqlite begins no transaction for a
    `SELECT`)."""
    await _add(sqlite_db, 1)
    async with sqlite_db.connection() as first:
        assert await _count(first) == 1
        await _add(sqlite_db, 2)  # committed by the writer while `first` is open
        async with sqlite_db.connection() as second:
            assert second.sync_connection is not first.sync_connection
            assert await _count(second) == 2
        assert await _count(first) == 2
        assert not first.sync_connection.closed


async def test_more_readers_than_the_pool_keeps_never_wait(sqlite_db: Database) -> None:
    await _add(sqlite_db, 1)
    async with asyncio.timeout(DEADLINE), contextlib.AsyncExitStack() as stack:
        conns = [await stack.enter_async_context(sqlite_db.connection())
                 for _ in range(KEPT + 3)]
        assert len({id(c.sync_connection) for c in conns}) == KEPT + 3
        assert [await _count(c) for c in conns] == [1] * (KEPT + 3)


async def test_a_reader_does_not_wait_for_a_writer_holding_the_lock(
    sqlite_db: Database,
) -> None:
    """An aiosqlite transaction holds the write lock with a row not yet committed: a read on
    the loop answers with what is committed, without waiting (a read that waited for the lock
    would raise once its busy timeout ran out, the loop stopped meanwhile)."""
    await _add(sqlite_db, 1)
    async with asyncio.timeout(DEADLINE), sqlite_db.engine.connect() as other:
        await other.begin()
        await other.execute(sa.text("INSERT INTO t (x) VALUES (2)"))
        async with sqlite_db.connection() as conn:
            assert await _count(conn) == 1
            busy = (await conn.exec_driver_sql("PRAGMA busy_timeout")).scalar_one()
        await other.rollback()
    assert busy == READ_BUSY_TIMEOUT_MS


async def test_only_sqlite_reads_run_on_the_loop(database_url: str) -> None:
    db = Database.connect(database_url)
    try:
        async with db.connection() as conn:
            inline = isinstance(conn, InlineConnection)
            assert (await conn.execute(sa.text("SELECT 1"))).scalar_one() == 1
    finally:
        await db.dispose()
    assert inline is database_url.startswith("sqlite")
