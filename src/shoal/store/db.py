"""Database connection: one async engine per process, SQLite tuned for one writer.

`Database.connect(url)` builds the engine; `migrate()` runs Alembic to head. SQLite runs in WAL
mode with a busy timeout; writes are funnelled through the runtime's group commit rather than
fighting over the lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import sqlalchemy as sa
import structlog
from alembic import command
from alembic.config import Config
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from shoal.metrics import WalCheckpoint, WalStatus
from shoal.store import fast
from shoal.store.inline_reads import InlineReads

log = structlog.get_logger(__name__)
MIGRATIONS_DIR = Path(__file__).parent / "migrations"
T = TypeVar("T")


BUSY_TIMEOUT_MS = 10000
CHECKPOINT_EVERY = 200  # writes between two WAL checkpoints of the SQLite database, at most
CHECKPOINT_SECONDS = 0.25  # seconds between two, at most, while writes go on (ADR 0050)
# A WAL of this many frames (pages) or more is restarted by the checkpoint that finds it so:
# the writer then writes it again from its start (ADR 0050).
WAL_RESTART_FRAMES = 4096
RESTART_TRIES = 5  # another process writing, or a read of the WAL: the restart is tried again
RESTART_PAUSE = 0.001  # seconds between two tries
# PostgreSQL: how the connection `fetch_row_autocommit` keeps plans its statements (ADR 0049).
# They are the runtime's batches, whose updates find each row by its primary key: looked up in
# the key's index whatever the table's statistics say (a new or fresh table looks too small for
# an index to pay, and a hash join then reads the whole table on every step), and planned once
# per statement, not again at each run.
KEYED_PLANNING = ("SET plan_cache_mode = force_generic_plan; SET enable_seqscan = off; "
                  "SET enable_hashjoin = off; SET enable_mergejoin = off")


def _is_busy(exc: sa.exc.OperationalError) -> bool:
    """Whether SQLite refused because another connection holds the lock."""
    text = str(exc.orig).lower()
    return "locked" in text or "busy" in text


def _writer_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA wal_autocheckpoint=0")  # checkpoints run on their own thread instead
    cur.execute("PRAGMA busy_timeout=0")  # inline tries never wait; the writer thread does
    cur.close()


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()


class Database:
    """An async engine plus what the store needs to know about its dialect.

    `run_write(fn)` runs a synchronous function inside one transaction. On SQLite it runs on a
    dedicated thread with a plain sqlite3 connection, so a whole batch of statements costs one
    thread hop instead of one per statement (or, with `inline=True`, right on the loop when the
    lock is free: ADR 0014); on PostgreSQL it runs through the async engine.
    """

    def __init__(
        self, engine: AsyncEngine, sync_engine: sa.Engine | None = None,
        write_engine: AsyncEngine | None = None, reads: InlineReads | None = None,
    ) -> None:
        self.engine = engine
        self._reads = reads  # SQLite: reads on the loop's thread (ADR 0047)
        self.dialect = engine.dialect.name
        self._sync_engine = sync_engine
        self._write_engine = write_engine or engine
        self._writer: ThreadPoolExecutor | None = None
        self._write_lock = threading.Lock()  # the SQLite writer connection: one user at a time
        self._write_conn: sa.Connection | None = None  # kept open between writes (under the lock)
        self._writes = 0
        self._checkpoint_writes = CHECKPOINT_EVERY  # the next checkpoint is due at this write
        self._checkpoint_time = time.monotonic() + CHECKPOINT_SECONDS  # or from this time
        self._checkpointer: ThreadPoolExecutor | None = None
        self._checkpoint_conn: sqlite3.Connection | None = None  # used on the checkpointer only
        self._checkpoint_future: Any = None  # the checkpoint in flight, if any
        self._checkpoints = dict.fromkeys(WalCheckpoint, 0)  # counted on the checkpointer
        # PostgreSQL: the writer connection `fetch_row_autocommit` keeps, with its asyncpg one.
        self._autocommit: tuple[Any, Any] | None = None
        self._autocommit_lock = asyncio.Lock()

    @classmethod
    def connect(cls, url: str, *, pool_size: int = 10) -> Database:
        """Create the engine for `url` (sqlite+aiosqlite:// or postgresql+asyncpg://)."""
        url = normalise_url(url)
        if url.startswith("sqlite"):
            path = url.split(":///", 1)[-1]
            if path and path != ":memory:":
                Path(path).parent.mkdir(parents=True, exist_ok=True)
            engine = create_async_engine(url, pool_size=pool_size, max_overflow=0,
                                         json_serializer=fast.json_dumps, hide_parameters=True)
            sa.event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
            sync_url = url.replace("+aiosqlite", "+pysqlite", 1)  # the writer's and the reads'
            writer = sa.create_engine(sync_url, poolclass=sa.pool.StaticPool,
                                      json_serializer=fast.json_dumps, hide_parameters=True,
                                      connect_args={"check_same_thread": False})
            sa.event.listen(writer, "connect", _sqlite_pragmas)
            sa.event.listen(writer, "connect", _writer_pragmas)
            reads = InlineReads(sync_url, json_serializer=fast.json_dumps, pragmas=_sqlite_pragmas)
            return cls(engine, writer, reads=reads)
        engine = create_async_engine(
            url, pool_size=pool_size, max_overflow=10, pool_pre_ping=True,
            json_serializer=fast.json_dumps, hide_parameters=True,
        )
        # The runtime's writes: one batch at a time, many a second, so no ping before each
        # (a round trip). A connection that died makes that batch fail, which invalidates the
        # pool; the runtime retries the batch's jobs on a fresh connection (ADR 0010).
        return cls(engine, write_engine=create_async_engine(
            url, pool_size=1, max_overflow=2, pool_pre_ping=False,
            json_serializer=fast.json_dumps, hide_parameters=True))

    @property
    def is_postgres(self) -> bool:
        """Whether row locks and SKIP LOCKED are available."""
        return self.dialect == "postgresql"

    async def migrate(self) -> None:
        """Upgrade the schema to the newest migration."""
        async with self.engine.begin() as conn:
            await conn.run_sync(_upgrade)

    async def run_write(self, fn: Callable[[sa.Connection], T], *, inline: bool = False) -> T:
        """Run `fn(connection)` in one transaction: committed if it returns, rolled back if not.

        With `inline` (for a short `fn` that may run twice: the runtime's batches), SQLite first
        tries the transaction right here on the event loop without waiting for the lock; if
        another connection holds it, or the writer thread is busy, the transaction is rolled
        back and runs on the writer thread as usual (ADR 0014).
        """
        if self._sync_engine is None:
            async with self._write_engine.begin() as conn:
                return await conn.run_sync(fn)
        if self._writer is None:
            self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="shoal-db-writer")
        engine = self._sync_engine
        if inline:
            done, value = self._try_inline(engine, fn)
            if done:
                return value  # type: ignore[return-value]

        def transaction() -> T:
            with self._write_lock:
                conn = self._writer_connection(engine)
                raw: Any = conn.connection.driver_connection  # the sqlite3 connection
                raw.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")  # wait for the lock here
                try:
                    with conn.begin():
                        return fn(conn)
                except BaseException:
                    self._drop_writer_connection()
                    raise
                finally:  # on the sqlite3 connection, which outlives a dropped wrapper
                    raw.execute("PRAGMA busy_timeout=0")

        value = await asyncio.get_running_loop().run_in_executor(self._writer, transaction)
        self._after_commit()
        return value

    def _try_inline(
        self, engine: sa.Engine, fn: Callable[[sa.Connection], T]
    ) -> tuple[bool, T | None]:
        """Run `fn` on this thread if the write lock is free at once; (False, None) if not."""
        if not self._write_lock.acquire(blocking=False):
            return False, None
        try:
            conn = self._writer_connection(engine)  # busy_timeout=0 here: the try never waits
            try:
                with conn.begin():
                    value = fn(conn)
            except sa.exc.OperationalError as exc:
                if not _is_busy(exc):
                    self._drop_writer_connection()
                    raise
                return False, None  # rolled back; the writer thread waits for the lock
            except BaseException:
                self._drop_writer_connection()
                raise
        finally:
            self._write_lock.release()
        self._after_commit()
        return True, value

    def _after_commit(self) -> None:
        """Start a WAL checkpoint on a thread and a connection of its own (the writer's
        auto-checkpoint is off) once CHECKPOINT_EVERY commits or CHECKPOINT_SECONDS have gone
        by since the last one began, whichever comes first, and none is in flight. In WAL mode
        a checkpoint does not need the write lock, so writes go on while it copies pages and
        waits for the disk; run under the lock, its fsync stalled the next batch by up to 20 ms
        (ADR 0019). The time bounds what a checkpoint finds under large batches, where 200
        commits wrote tens of thousands of frames (ADR 0050)."""
        self._writes += 1
        if self._writes < self._checkpoint_writes and time.monotonic() < self._checkpoint_time:
            return
        if self._sync_engine is None or (
                self._checkpoint_future is not None and not self._checkpoint_future.done()):
            return
        self._checkpoint_writes = self._writes + CHECKPOINT_EVERY
        self._checkpoint_time = time.monotonic() + CHECKPOINT_SECONDS
        path = self._sync_engine.url.database
        if not path or path == ":memory:":
            return  # one connection sees an in-memory database; nothing to checkpoint
        if self._checkpointer is None:
            self._checkpointer = ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="shoal-db-checkpoint")
        self._checkpoint_future = self._checkpointer.submit(self._checkpoint, path)

    def _checkpoint(self, path: str) -> None:
        """On the checkpointer thread: a passive checkpoint, and, once the WAL has reached
        WAL_RESTART_FRAMES, a restarting one (a failure is logged and the next one starts on a
        fresh connection; the WAL only grows meanwhile).

        A passive checkpoint copies the frames that were in the WAL when it began; writes go on
        meanwhile, so under steady writes there are always newer ones when it ends, and SQLite
        only writes the WAL again from its start when every frame has been copied: the WAL grew
        without end (ADR 0050). The restarting checkpoint copies the few frames written since
        while holding the write lock, so that none is added meanwhile, and leaves the WAL for
        the next writer to start again. It holds the store's own write lock too: a batch waits
        on it for just as long (ADR 0014's writer thread), where SQLite's busy handler would
        sleep 1, 2, 5 ms and more between looks. It never waits on SQLite's busy handler itself
        (its timeout is 0), which it would do holding the write lock: while another process
        writes it does what a passive one does, and while a read uses the WAL it leaves it be.
        Either way it is tried again a millisecond later, a few times, then by the next
        checkpoint."""
        try:
            conn = self._checkpoint_conn
            if conn is None:
                conn = self._checkpoint_conn = sqlite3.connect(
                    path, check_same_thread=False, timeout=0)
            _busy, frames, _copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            self._checkpoints[WalCheckpoint.PASSIVE] += 1
            for _ in range(RESTART_TRIES if frames >= WAL_RESTART_FRAMES else 0):
                with self._write_lock:  # a batch meanwhile waits here, not in SQLite's sleeps
                    restarted = not conn.execute("PRAGMA wal_checkpoint(RESTART)").fetchone()[0]
                if restarted:
                    self._checkpoints[WalCheckpoint.RESTARTED] += 1
                    break  # the next write starts the WAL again
                self._checkpoints[WalCheckpoint.DEFERRED] += 1
                time.sleep(RESTART_PAUSE)
        except sqlite3.Error as exc:
            self._checkpoints[WalCheckpoint.FAILED] += 1
            log.warning("db.checkpoint_failed", error=str(exc))
            conn, self._checkpoint_conn = self._checkpoint_conn, None
            if conn is not None:
                with contextlib.suppress(sqlite3.Error):
                    conn.close()

    def wal_status(self) -> WalStatus | None:
        """SQLite's write-ahead log, for `/metrics`: its file's size now and the checkpoints
        so far (None on PostgreSQL and for an in-memory database)."""
        path = self._sync_engine.url.database if self._sync_engine is not None else None
        if not path or path == ":memory:":
            return None
        try:
            size = os.stat(f"{path}-wal").st_size
        except FileNotFoundError:  # no write since the last connection closed
            size = 0
        return WalStatus(size, dict(self._checkpoints))

    async def checkpointed(self) -> None:
        """Wait for the WAL checkpoint in flight, if any (tests, shutdown)."""
        if self._checkpoint_future is not None:
            await asyncio.wrap_future(self._checkpoint_future)

    def _writer_connection(self, engine: sa.Engine) -> sa.Connection:
        """The SQLite writer's connection, opened on first use and then kept: checking a
        connection out of the pool and back in costs more than a small batch's statements.
        The caller holds the write lock."""
        if self._write_conn is None or self._write_conn.closed:
            self._write_conn = engine.connect()
        return self._write_conn

    def _drop_writer_connection(self) -> None:
        """Close the writer's connection after a failure; the next write opens a fresh one."""
        conn, self._write_conn = self._write_conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()

    def begin(self) -> Any:
        """A connection inside one transaction (commit on success, rollback on error)."""
        return self.engine.begin()

    def connection(self) -> Any:
        """A plain connection for reads: on SQLite, answered on the loop's own thread
        (`InlineConnection`, ADR 0047)."""
        if self._reads is not None:
            return self._reads.connection()
        return self.engine.connect()

    async def fetch_row_autocommit(self, sql: str, params: Sequence[Any]) -> Any:
        """PostgreSQL: run one statement (`$n` parameters) on a writer connection outside any
        transaction, so that it commits by itself, and return its first row (ADR 0023).

        The statement goes straight to asyncpg, which prepares each text once, on a connection
        kept checked out of the writer pool between calls: checking one out and back in for
        each statement cost about 160 µs, a tenth of a W2 step (ADR 0025). It plans them for
        key lookups (`KEYED_PLANNING`, ADR 0049), so it never goes back to the pool: it is
        closed instead. A statement that fails leaves the connection usable (no transaction
        was open); any other failure, or a cancellation mid-flight, may leave it in an unknown
        state, so it is discarded and the next call checks out a fresh one.
        """
        import asyncpg  # type: ignore[import-untyped]  # only PostgreSQL gets here

        async with self._autocommit_lock:  # one statement at a time on the kept connection
            if self._autocommit is None:
                conn = await self._write_engine.connect()
                try:
                    raw: Any = (await conn.get_raw_connection()).driver_connection
                    await raw.execute(KEYED_PLANNING)
                except BaseException:
                    with contextlib.suppress(Exception):
                        await conn.invalidate()
                    await conn.close()
                    raise
                self._autocommit = (conn, raw)
            conn, driver = self._autocommit
            try:
                return await driver.fetchrow(sql, *params)
            except asyncpg.PostgresError:
                raise
            except BaseException:
                self._autocommit = None
                with contextlib.suppress(Exception):
                    await conn.invalidate()
                    await conn.close()
                raise

    async def _release_autocommit(self) -> None:
        """Close the kept autocommit connection (its planner settings stay out of the pool)."""
        kept, self._autocommit = self._autocommit, None
        if kept is not None:
            with contextlib.suppress(Exception):
                await kept[0].invalidate()
                await kept[0].close()

    async def dispose(self) -> None:
        """Close every pooled connection (and the SQLite writer thread)."""
        await self._release_autocommit()
        await self.engine.dispose()
        if self._write_engine is not self.engine:
            await self._write_engine.dispose()
        if self._writer is not None:
            self._writer.shutdown(wait=True)
            self._writer = None
        if self._checkpointer is not None:
            self._checkpointer.shutdown(wait=True)
            self._checkpointer = None
        if self._checkpoint_conn is not None:
            self._checkpoint_conn.close()
            self._checkpoint_conn = None
        with self._write_lock:
            self._drop_writer_connection()
        if self._sync_engine is not None:
            self._sync_engine.dispose()
        if self._reads is not None:
            self._reads.dispose()


_RACE_STATES = frozenset({"23505", "40001", "40P01"})  # unique, serialization, deadlock


def lost_a_race(exc: BaseException) -> bool:
    """Whether a write failed because another writer got there first (a unique key taken, a
    row at another version, or a deadlock between the two that the database broke): reading
    again and deciding again may well succeed."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, sa.exc.IntegrityError | sqlite3.IntegrityError):
            return True
        if getattr(seen, "code", None) == "stale_write":
            return True
        if getattr(seen, "sqlstate", None) in _RACE_STATES:
            return True
        seen = getattr(seen, "orig", None) or seen.__cause__
    return False


def normalise_url(url: str) -> str:
    """Accept plain postgresql:// and sqlite:// URLs and pick the async drivers."""
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        return "postgresql+asyncpg://" + url.split("://", 1)[1]
    if url.startswith("sqlite://") and not url.startswith("sqlite+"):
        return "sqlite+aiosqlite://" + url.split("://", 1)[1]
    return url


def alembic_config() -> Config:
    """The Alembic configuration pointing at the package's migrations."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    return cfg


def _upgrade(sync_conn: sa.Connection) -> None:
    cfg = alembic_config()
    cfg.attributes["connection"] = sync_conn
    command.upgrade(cfg, "head")
