"""The SQLite writer (ADR 0014): a runtime batch is written on the event loop when the lock is
free, and on the writer thread, without blocking the loop, when another connection holds it."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

import pytest
import sqlalchemy as sa

from shoal.metrics import WalCheckpoint
from shoal.store import db as db_module
from shoal.store.db import Database

DEADLINE = 10.0


def _insert(value: int, seen: list[str]) -> object:
    def write(conn: sa.Connection) -> int:
        seen.append(threading.current_thread().name)
        conn.exec_driver_sql("INSERT INTO t (x) VALUES (?)", (value,))
        return value

    return write


async def _database(tmp_path: Path) -> Database:
    db = Database.connect(f"sqlite+aiosqlite:///{tmp_path / 'w.db'}")
    await db.run_write(lambda conn: conn.exec_driver_sql("CREATE TABLE t (x INTEGER)"))
    return db


async def _values(db: Database) -> list[int]:
    async with db.connection() as conn:
        return [r[0] for r in (await conn.exec_driver_sql("SELECT x FROM t ORDER BY x")).all()]


async def test_inline_write_runs_on_the_loop_when_the_lock_is_free(tmp_path: Path) -> None:
    """No thread hop: the batch runs on the loop's own thread and is committed."""
    db = await _database(tmp_path)
    seen: list[str] = []
    try:
        assert await db.run_write(_insert(1, seen), inline=True) == 1  # type: ignore[arg-type]
        assert seen == [threading.current_thread().name]
        assert await _values(db) == [1]
    finally:
        await db.dispose()


async def test_inline_write_waits_on_the_writer_thread_when_locked(tmp_path: Path) -> None:
    """Another connection holds the write lock: the batch is rolled back, handed to the writer
    thread, which waits for the lock while the loop goes on; then it commits exactly once."""
    db = await _database(tmp_path)
    seen: list[str] = []
    try:
        # Were the inline try to wait for the lock (10 s), it would block the loop, and this
        # deadline would fire as soon as the loop ran again.
        async with asyncio.timeout(DEADLINE / 2), db.engine.connect() as other:
            await other.begin()
            await other.exec_driver_sql("INSERT INTO t (x) VALUES (0)")  # takes the write lock
            write = asyncio.create_task(db.run_write(_insert(2, seen), inline=True))  # type: ignore[arg-type]
            ticks = 0
            while not seen or seen[-1] == threading.current_thread().name:
                ticks += 1  # the loop keeps running while the write waits
                await asyncio.sleep(0)
            assert not write.done()
            assert seen[0] == threading.current_thread().name  # tried inline first
            assert seen[-1].startswith("shoal-db-writer")
            await other.commit()
        assert await asyncio.wait_for(write, DEADLINE) == 2
        assert ticks > 0
        assert await _values(db) == [0, 2]  # the inline try left nothing behind
    finally:
        await db.dispose()


async def test_the_wal_is_checkpointed_off_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer's own auto-checkpoint is off; the periodic checkpoint on its own thread
    keeps the WAL from growing with every write (without it, it would)."""

    async def wal_size_after_writes(name: str, every: int) -> int:
        monkeypatch.setattr(db_module, "CHECKPOINT_EVERY", every)
        monkeypatch.setattr(db_module, "CHECKPOINT_SECONDS", 3600.0)  # by the count alone
        db = Database.connect(f"sqlite+aiosqlite:///{tmp_path / name}")
        try:
            await db.run_write(lambda conn: conn.exec_driver_sql("CREATE TABLE b (x BLOB)"))
            for _ in range(60):
                await db.run_write(lambda conn: conn.exec_driver_sql(
                    "INSERT INTO b (x) VALUES (?)", (b"x" * 8192,)), inline=True)
                await db.checkpointed()  # however busy the machine, before the next insert
            return (tmp_path / f"{name}-wal").stat().st_size
        finally:
            await db.dispose()

    unchecked = await wal_size_after_writes("never.db", 10**9)
    checked = await wal_size_after_writes("often.db", 5)
    assert unchecked > 60 * 8192  # every write stayed in the WAL
    assert checked < unchecked / 4


async def test_a_checkpoint_does_not_hold_up_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint waiting on the disk (here: on an event) does not block the writes behind
    it, inline or on the writer thread, and it loses none of them."""
    monkeypatch.setattr(db_module, "CHECKPOINT_EVERY", 2)
    monkeypatch.setattr(db_module, "CHECKPOINT_SECONDS", 3600.0)
    release = threading.Event()
    started = threading.Event()
    real = Database._checkpoint

    def slow_checkpoint(self: Database, path: str) -> None:
        started.set()
        release.wait(DEADLINE)
        real(self, path)

    monkeypatch.setattr(Database, "_checkpoint", slow_checkpoint)
    db = Database.connect(f"sqlite+aiosqlite:///{tmp_path / 'busy.db'}")
    try:
        await db.run_write(lambda conn: conn.exec_driver_sql("CREATE TABLE b (x BLOB)"))
        await db.run_write(lambda conn: conn.exec_driver_sql(
            "INSERT INTO b (x) VALUES (?)", (b"x" * 8192,)))  # the second write: a checkpoint
        assert await asyncio.to_thread(started.wait, DEADLINE)
        for n in range(10):  # neither way of writing waits for the stuck checkpoint
            await asyncio.wait_for(db.run_write(lambda conn: conn.exec_driver_sql(
                "INSERT INTO b (x) VALUES (?)", (b"y" * 8192,)), inline=n % 2 == 0), DEADLINE)
        assert not db._checkpoint_future.done()
        release.set()
        await asyncio.wait_for(db.checkpointed(), DEADLINE)
        async with db.connection() as conn:
            assert (await conn.exec_driver_sql("SELECT count(*) FROM b")).scalar() == 11
    finally:
        release.set()
        await db.dispose()


def _every_fourth_write(path: Path, monkeypatch: pytest.MonkeyPatch,
                        restart_at: int) -> tuple[Path, Path, Database]:
    """A database at `path` whose every fourth write starts a checkpoint (and nothing else
    does), restarting the WAL from `restart_at` frames; with its WAL's path."""
    monkeypatch.setattr(db_module, "CHECKPOINT_EVERY", 4)
    monkeypatch.setattr(db_module, "CHECKPOINT_SECONDS", 3600.0)
    monkeypatch.setattr(db_module, "WAL_RESTART_FRAMES", restart_at)
    return path, path.with_name(f"{path.name}-wal"), Database.connect(f"sqlite+aiosqlite:///{path}")


class _WrittenWhileCopying:
    """The checkpointer's connection, as the test hands it over: each passive checkpoint
    copies the frames that were in the WAL when it began, while the test writes once more, as
    steady writes always do meanwhile. (A read begun before that write pins the copy to the
    frames before it, as the copy's own start does.)"""

    def __init__(self, conn: sqlite3.Connection, path: Path, lock: threading.Lock) -> None:
        self._conn = conn
        self._reader = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._lock = lock
        self.copying = threading.Event()
        self.written = threading.Event()
        self.restarts_locked: list[bool] = []  # whether the store's write lock was held

    def execute(self, sql: str) -> sqlite3.Cursor:
        if "RESTART" in sql:
            self.restarts_locked.append(self._lock.locked())
        if "PASSIVE" not in sql:
            return self._conn.execute(sql)
        self._reader.execute("BEGIN")
        self._reader.execute("SELECT count(*) FROM b").fetchone()
        self.copying.set()
        assert self.written.wait(DEADLINE)
        self.written.clear()
        try:
            return self._conn.execute(sql)
        finally:
            self._reader.execute("COMMIT")

    def close(self) -> None:
        self._reader.close()
        self._conn.close()


async def test_the_wal_starts_again_while_writes_go_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under steady writes each passive checkpoint ends with newer frames in the WAL than it
    copied, and SQLite only writes the WAL again from its start once every frame is copied:
    before ADR 0050 its file grew with every write for as long as the writes went on. Now a
    checkpoint that finds the WAL past WAL_RESTART_FRAMES restarts it, and the file stops
    growing."""
    path, wal, db = _every_fourth_write(tmp_path / "steady.db", monkeypatch, restart_at=16)
    checkpointer = _WrittenWhileCopying(
        sqlite3.connect(path, check_same_thread=False, timeout=0), path, db._write_lock)

    async def write() -> None:
        await db.run_write(lambda conn: conn.exec_driver_sql(
            "INSERT INTO b (x) VALUES (?)", (b"x" * 8192,)), inline=True)

    try:
        await db.run_write(lambda conn: conn.exec_driver_sql("CREATE TABLE b (x BLOB)"))
        db._checkpoint_conn = checkpointer  # type: ignore[assignment]
        sizes = []
        for _ in range(30):
            started = db._checkpoint_future
            while db._checkpoint_future is started:  # every fourth write starts a checkpoint
                await write()
            assert await asyncio.to_thread(checkpointer.copying.wait, DEADLINE)
            checkpointer.copying.clear()
            await write()  # while the passive checkpoint copies
            checkpointer.written.set()
            await asyncio.wait_for(db.checkpointed(), DEADLINE)
            sizes.append(wal.stat().st_size)
        assert sizes[-1] == sizes[9] < 30 * 4 * 8192  # it stopped growing
        # A batch during a restart waits on the store's lock, not in SQLite's busy sleeps.
        assert checkpointer.restarts_locked
        assert all(checkpointer.restarts_locked)
        # `/metrics` sees the same: the WAL's size, and every checkpoint by what it did.
        status = db.wal_status()
        assert status is not None
        assert status.size == sizes[-1]
        counted = status.checkpoints
        assert counted[WalCheckpoint.PASSIVE] == 30
        assert counted[WalCheckpoint.RESTARTED] >= 1
        assert counted[WalCheckpoint.RESTARTED] + counted[WalCheckpoint.DEFERRED] == len(
            checkpointer.restarts_locked)
        assert counted[WalCheckpoint.FAILED] == 0
        async with db.connection() as conn:
            assert (await conn.exec_driver_sql("SELECT count(*) FROM b")).scalar() == 120
    finally:
        checkpointer.written.set()
        await db.dispose()


async def test_a_reader_of_the_wal_does_not_hold_the_restart_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read in progress on the WAL keeps it from being restarted: the restarting checkpoint
    gives up at once rather than wait on SQLite's busy handler, which it would do holding the
    write lock (every write meanwhile waiting too); the WAL is restarted once the read ends."""
    path, wal, db = _every_fourth_write(tmp_path / "read.db", monkeypatch, restart_at=1)
    reader = sqlite3.connect(path, isolation_level=None)

    async def writes(n: int) -> None:
        for _ in range(n):
            await db.run_write(lambda conn: conn.exec_driver_sql(
                "INSERT INTO b (x) VALUES (?)", (b"x" * 8192,)), inline=True)
            await asyncio.wait_for(db.checkpointed(), 2.0)  # well under the 10 s busy timeout

    try:
        await db.run_write(lambda conn: conn.exec_driver_sql("CREATE TABLE b (x BLOB)"))
        await writes(3)
        reader.execute("BEGIN")
        assert reader.execute("SELECT count(*) FROM b").fetchone() == (3,)  # reads the WAL
        began = db.wal_status()
        await writes(12)
        held = wal.stat().st_size
        assert held > 12 * 8192  # none of it written again while the read went on
        status = db.wal_status()
        assert began is not None
        assert status is not None
        assert status.size == held
        # Three checkpoints, each of whose restarts gave way every time it was tried.
        assert status.checkpoints[WalCheckpoint.DEFERRED] - began.checkpoints[
            WalCheckpoint.DEFERRED] == 3 * db_module.RESTART_TRIES
        assert status.checkpoints[WalCheckpoint.RESTARTED] == began.checkpoints[
            WalCheckpoint.RESTARTED]
        reader.execute("COMMIT")
        await writes(4)  # the checkpoint among them restarts the WAL
        settled = wal.stat().st_size
        await writes(12)
        assert wal.stat().st_size == settled  # written again from its start: no longer
        status = db.wal_status()
        assert status is not None
        restarted = WalCheckpoint.RESTARTED
        assert status.checkpoints[restarted] > began.checkpoints[restarted]
    finally:
        reader.close()
        await db.dispose()


async def test_a_checkpoint_is_due_in_time_however_few_the_commits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under large batches 200 commits wrote tens of thousands of frames before a checkpoint
    came: one is also due once CHECKPOINT_SECONDS have gone by since the last began."""
    monkeypatch.setattr(db_module, "CHECKPOINT_EVERY", 10**9)

    async def checkpoints_in_three_writes(name: str) -> int:
        db = Database.connect(f"sqlite+aiosqlite:///{tmp_path / name}")
        seen: list[object] = []  # the checkpoints started (kept: their ids stay theirs)
        try:
            await db.run_write(lambda conn: conn.exec_driver_sql("CREATE TABLE b (x BLOB)"))
            for _ in range(3):
                await db.run_write(lambda conn: conn.exec_driver_sql(
                    "INSERT INTO b (x) VALUES (?)", (b"x" * 8192,)), inline=True)
                started = db._checkpoint_future
                if started is not None and all(started is not s for s in seen):
                    seen.append(started)
                    await asyncio.wait_for(db.checkpointed(), DEADLINE)
            return len(seen)
        finally:
            await db.dispose()

    monkeypatch.setattr(db_module, "CHECKPOINT_SECONDS", 0.0)
    assert await checkpoints_in_three_writes("due.db") == 3  # one after every write
    monkeypatch.setattr(db_module, "CHECKPOINT_SECONDS", 3600.0)
    assert await checkpoints_in_three_writes("later.db") == 0


class _Broken:
    """A checkpointer connection whose every statement fails, as a disk error would."""

    def __init__(self) -> None:
        self.closed = False

    def execute(self, sql: str) -> sqlite3.Cursor:
        raise sqlite3.OperationalError("disk I/O error")

    def close(self) -> None:
        self.closed = True


async def _four_writes(db: Database) -> None:
    """Four writes of 8 kB, then the checkpoint the fourth started, done."""
    for _ in range(4):
        await db.run_write(lambda conn: conn.exec_driver_sql(
            "INSERT INTO b (x) VALUES (?)", (b"x" * 8192,)), inline=True)
    await asyncio.wait_for(db.checkpointed(), DEADLINE)


async def test_a_failed_checkpoint_is_counted_and_the_next_one_starts_afresh(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, wal, db = _every_fourth_write(tmp_path / "broken.db", monkeypatch, restart_at=10**9)
    broken = _Broken()
    try:
        await db.run_write(lambda conn: conn.exec_driver_sql("CREATE TABLE b (x BLOB)"))
        db._checkpoint_conn = broken  # type: ignore[assignment]
        await _four_writes(db)  # the fourth starts a checkpoint, on the broken connection
        status = db.wal_status()
        assert status is not None
        assert status.checkpoints[WalCheckpoint.FAILED] == 1
        assert status.checkpoints[WalCheckpoint.PASSIVE] == 0
        assert broken.closed
        assert db._checkpoint_conn is None
        assert status.size == wal.stat().st_size > 4 * 8192  # nothing copied: the WAL grew
        await _four_writes(db)  # the next checkpoint opens a connection of its own, and works
        status = db.wal_status()
        assert status is not None
        assert status.checkpoints[WalCheckpoint.PASSIVE] == 1
    finally:
        await db.dispose()


@pytest.mark.postgres
async def test_postgresql_reports_no_wal_of_sqlites(pg_db: Database) -> None:
    assert pg_db.wal_status() is None
