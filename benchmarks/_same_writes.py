"""The same writes with no Shoal logic: Shoal's own transactions, recorded, replayed by a
minimal orchestrator (`same_writes.py`).

The durable floor (`_floor.py`) writes small tables of its own: the least any durable
orchestrator could write. This floor writes exactly what Shoal wrote for the same run: its
tables, indexes, rows, events and transactions, byte for byte, so that Shoal's time beside
it is its logic alone (the engine, the runtime, the API, the worker protocol), not its schema.

- **Recording**: on SQLite every `sqlite3` connection the process opens is made a
  `Recorder`, which notes each statement that changes the database, with its parameters as
  the driver received them, and times each of them and each commit (`statement_cost.py`
  sets the times beside the same statements replayed alone); on PostgreSQL the runtime's
  self-committing batch statement (`Database.fetch_row_autocommit`) is noted whole, and
  every other statement as SQLAlchemy's events see it. Statements are grouped by
  transaction at each commit, in commit order across connections. A commit made by the
  runtime's batch (`Runtime._process`) also notes the results that batch stored (its
  triggers) and, from `Executes.send` after it, the attempts it dispatched and to which
  worker. (The first commit while a batch is under way is taken for the batch's: nothing
  else writes while a benchmark's workload runs.) The database is copied just before the
  recorded run (SQLite's backup API; `pg_dump`), so the replay starts from the state
  Shoal's run did.
- **Replaying**: on a fresh copy of that database (a file copy; `pg_restore` into a new
  database), each recorded transaction runs in order once the results it stored have come
  back from the workers; then its dispatches go out, one frame per worker, to `_floor.py`'s
  worker process (the one the durable floor uses). A transaction no result triggered (a
  submission's, a heartbeat's) runs as soon as the one before it has. On SQLite a transaction
  is `BEGIN`, its statements and `COMMIT` inline on the event loop, with the pragmas Shoal's
  connections set, and SQLite's own automatic checkpoints (as the durable floor's); on
  PostgreSQL the batch statement goes over `asyncpg` on a connection planned as Shoal's batch
  connection is (`KEYED_PLANNING`), the other transactions on a second connection.

The replay keeps Shoal's batching: a batch that stored 25 results waits for those 25, as the
recorded one held them. It leaves out Shoal's Python on both sides of the socket: the API,
the engine, the runtime, the converters, SQLAlchemy, Shoal's worker and its protocol.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import subprocess
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import websockets
from _floor import WORKERS, Workers, workers_of
from _shoal_worker import acks_frame, execute_frame, register, results_of, worker_process

_CHANGES = ("INSERT", "UPDATE", "DELETE", "REPLACE")


@dataclass
class Tx:
    """One committed transaction: its statements (SQL, parameters, executemany or not), the
    attempts whose results it stored and those it dispatched (attempt id, worker index); on
    SQLite, the seconds each statement and the commit took inside Shoal's run."""

    statements: list[tuple[str, Any, bool]]
    triggers: list[str] = field(default_factory=list)
    dispatches: list[tuple[str, int]] = field(default_factory=list)
    autocommit: bool = False  # PostgreSQL: one statement that commits by itself (ADR 0023)
    seconds: list[float] = field(default_factory=list)  # SQLite: one per statement
    commit_seconds: float | None = None  # SQLite: the commit's


class Recording:
    """What the recorders of this process have seen while `on`."""

    def __init__(self) -> None:
        self.on = False
        self.txs: list[Tx] = []
        self.pending: dict[int, list[tuple[str, Any, bool]]] = {}  # by connection
        self.seconds: dict[int, list[float]] = {}  # SQLite: the pending statements' times
        self.committing: dict[int, Tx | None] = {}  # SQLite: a commit whose time comes next
        self.lock = threading.Lock()
        self.triggers: list[str] | None = None  # the runtime batch under way: its results
        self.last_batch: Tx | None = None  # the runtime's last committed batch
        self.workers: dict[Any, int] = {}  # worker id → index in the replay

    def note(self, conn: Any, sql: str, params: Any, many: bool) -> bool:
        """A statement `conn` ran: a change is kept for its transaction, a commit ends it.
        Whether the statement is one whose time `took` should be told."""
        if not self.on:
            return False
        word = sql.lstrip()[:8].upper()
        if word.startswith(_CHANGES) or (word.startswith("WITH") and any(
                change in sql.upper() for change in _CHANGES)):
            with self.lock:
                self.pending.setdefault(id(conn), []).append((sql, params, many))
            return True
        if word.startswith(("COMMIT", "END")):
            self.commit(conn)
            return True
        if word.startswith("ROLLBACK"):
            self.rollback(conn)
        return False

    def took(self, conn: Any, seconds: float) -> None:
        """The statement `note` kept last on `conn`, or the commit `commit` ended last, took
        `seconds` (SQLite's recorders time what they run)."""
        if not self.on:
            return
        with self.lock:
            if id(conn) in self.committing:  # a commit (of a transaction that wrote, or not)
                tx = self.committing.pop(id(conn))
                if tx is not None:
                    tx.commit_seconds = seconds
            else:
                self.seconds.setdefault(id(conn), []).append(seconds)

    def commit(self, conn: Any) -> None:
        """`conn` committed: its pending changes are one transaction."""
        if not self.on:
            return
        with self.lock:
            statements = self.pending.pop(id(conn), [])
            seconds = self.seconds.pop(id(conn), [])
            tx = Tx(statements, seconds=seconds) if statements else None
            if tx is not None:
                self._add(tx)
            self.committing[id(conn)] = tx  # its time comes next (`took`) on SQLite

    def failed(self, conn: Any) -> None:
        """The commit `commit` just noted for `conn` failed: its transaction did not happen."""
        with self.lock:
            tx = self.committing.get(id(conn))
            if tx is not None and tx in self.txs:
                self.txs.remove(tx)
                if self.last_batch is tx:
                    self.last_batch = None

    def whole(self, sql: str, params: Any) -> None:
        """A statement that committed by itself (PostgreSQL's batch): a transaction."""
        if self.on:
            with self.lock:
                self._add(Tx([(sql, list(params), False)], autocommit=True))

    def _add(self, tx: Tx) -> None:
        if self.triggers is not None:  # the runtime's batch: the first commit in it
            tx.triggers, self.triggers = self.triggers, None
            self.last_batch = tx
        self.txs.append(tx)

    def rollback(self, conn: Any) -> None:
        """`conn` rolled back: nothing of its transaction happened."""
        with self.lock:
            self.pending.pop(id(conn), None)
            self.seconds.pop(id(conn), None)

    def dispatched(self, attempts: list[tuple[Any, str]]) -> None:
        """The runtime sent these (worker id, attempt id) after its last batch's commit."""
        if not self.on or self.last_batch is None:
            return
        for worker, attempt in attempts:
            index = self.workers.setdefault(worker, len(self.workers) % WORKERS)
            self.last_batch.dispatches.append((attempt, index))

    @contextlib.contextmanager
    def recording(self) -> Iterator[list[Tx]]:
        """Record while inside; yields the list the transactions go to."""
        self.txs, self.pending, self.last_batch, self.triggers = [], {}, None, None
        self.seconds, self.committing = {}, {}
        self.on = True
        try:
            yield self.txs
        finally:
            self.on = False


RECORDING = Recording()


def _timed(conn: Any, run: Any, sql: str, params: Any, many: bool) -> Any:
    """`run(sql, params)` on `conn`, noted, and timed when `RECORDING` keeps it."""
    if not RECORDING.note(conn, sql, params, many):
        return run(sql, params)
    began = time.perf_counter()
    try:
        return run(sql, params)
    finally:
        RECORDING.took(conn, time.perf_counter() - began)


class _Cursor(sqlite3.Cursor):
    def execute(self, sql: str, params: Any = (), /) -> Any:  # type: ignore[override]
        return _timed(self.connection, super().execute, sql, params, False)

    def executemany(self, sql: str, params: Any, /) -> Any:  # type: ignore[override]
        return _timed(self.connection, super().executemany, sql, list(params), True)


class Recorder(sqlite3.Connection):
    """A `sqlite3` connection that tells `RECORDING` what it changes, and how long each change
    and each commit took."""

    def cursor(self, factory: Any = None) -> Any:  # type: ignore[override]
        return super().cursor(factory or _Cursor)

    def execute(self, sql: str, params: Any = (), /) -> Any:  # type: ignore[override]
        return _timed(self, super().execute, sql, params, False)

    def executemany(self, sql: str, params: Any, /) -> Any:  # type: ignore[override]
        return _timed(self, super().executemany, sql, list(params), True)

    def commit(self) -> None:
        RECORDING.commit(self)
        began = time.perf_counter()
        try:
            super().commit()
        except BaseException:
            RECORDING.failed(self)
            raise
        finally:  # its time is told even when it fails: the next statement's is its own
            RECORDING.took(self, time.perf_counter() - began)

    def rollback(self) -> None:
        RECORDING.rollback(self)
        super().rollback()


@contextlib.contextmanager
def installed() -> Iterator[None]:
    """While inside, every `sqlite3` connection this process opens is a `Recorder`, and the
    runtime's batches and dispatches are noted; enter before the control plane starts."""
    import sqlalchemy as sa

    from shoal.runtime import core, executes
    from shoal.runtime.jobs import Result
    from shoal.store.db import Database

    plain, process, send = sqlite3.connect, core.Runtime._process, executes.Executes.send
    fetch = Database.fetch_row_autocommit

    def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        kwargs.setdefault("factory", Recorder)
        return plain(*args, **kwargs)

    async def _process(self: Any, batch: list[Any], **kwargs: Any) -> None:
        RECORDING.triggers = [str(j.msg.attempt_id) for j in batch if isinstance(j, Result)]
        try:
            await process(self, batch, **kwargs)
        finally:
            RECORDING.triggers = None

    async def _send(self: Any, dispatches: list[Any]) -> None:
        RECORDING.dispatched([(wc.worker_id, str(att.id)) for wc, att in dispatches])
        await send(self, dispatches)

    async def _fetch(self: Any, sql: str, params: Any) -> Any:
        row = await fetch(self, sql, params)
        RECORDING.whole(sql, params)  # (a statement that failed changed nothing)
        return row

    # PostgreSQL's other writes go through SQLAlchemy: its events see each statement.
    def before(conn: Any, _cursor: Any, sql: str, params: Any, _ctx: Any, many: bool) -> None:
        if conn.dialect.name == "postgresql":
            RECORDING.note(conn, sql, params, many)

    def committed(conn: Any) -> None:
        if conn.dialect.name == "postgresql":
            RECORDING.commit(conn)

    def rolled_back(conn: Any) -> None:
        if conn.dialect.name == "postgresql":
            RECORDING.rollback(conn)

    events = [("before_cursor_execute", before), ("commit", committed),
              ("rollback", rolled_back)]
    for name, fn in events:
        sa.event.listen(sa.engine.Engine, name, fn)
    sqlite3.connect = sqlite3.dbapi2.connect = connect  # type: ignore[assignment]
    core.Runtime._process = _process  # type: ignore[method-assign]
    executes.Executes.send = _send  # type: ignore[method-assign]
    Database.fetch_row_autocommit = _fetch  # type: ignore[method-assign]
    try:
        yield
    finally:
        sqlite3.connect = sqlite3.dbapi2.connect = plain  # type: ignore[assignment]
        core.Runtime._process = process  # type: ignore[method-assign]
        executes.Executes.send = send  # type: ignore[method-assign]
        Database.fetch_row_autocommit = fetch  # type: ignore[method-assign]
        for name, fn in events:
            sa.event.remove(sa.engine.Engine, name, fn)


def snapshot(url: str, copy: Path) -> None:
    """A consistent copy of the database at `url` (Shoal's URL) in the file `copy`: SQLite's
    backup, or PostgreSQL's `pg_dump` (custom format), taken while Shoal runs."""
    if url.startswith("sqlite"):
        src = sqlite3.connect(url.split(":///", 1)[1])
        dst = sqlite3.connect(copy)
        try:
            src.backup(dst)
        finally:
            dst.close()
            src.close()
        return
    subprocess.run(["pg_dump", "--format=custom", "--file", str(copy), _libpq(url)],
                   check=True, capture_output=True)


def _libpq(url: str) -> str:
    return url.replace("+asyncpg", "", 1)


SHOAL_PRAGMAS = ("journal_mode=WAL", "synchronous=NORMAL", "foreign_keys=ON")
"""The pragmas Shoal's SQLite connections set (`store.db`), for a replay's connection."""


class SqliteTarget:
    """A copy of a snapshot on SQLite, written inline as Shoal's batches are, with the pragmas
    Shoal's connections set (SQLite's own automatic checkpoints, as the durable floor's)."""

    def __init__(self, path: Path) -> None:
        self.db = sqlite3.connect(path, isolation_level=None)
        for pragma in SHOAL_PRAGMAS:
            self.db.execute(f"PRAGMA {pragma}")

    async def apply(self, tx: Tx) -> None:
        """`tx`'s statements in one transaction."""
        db = self.db
        db.execute("BEGIN")
        for sql, params, many in tx.statements:
            if many:
                db.executemany(sql, params)
            else:
                db.execute(sql, params)
        db.execute("COMMIT")

    async def close(self) -> None:
        """Disconnect."""
        self.db.close()


class PostgresTarget:
    """A copy of a snapshot on PostgreSQL: Shoal's self-committing batches on a connection
    planned as Shoal's writer connection is (`KEYED_PLANNING`), its other transactions on
    another."""

    def __init__(self, batches: Any, others: Any) -> None:
        self.batches, self.others = batches, others

    @classmethod
    async def restored(cls, dump: Path, url: str) -> PostgresTarget:
        """The empty database at `url`, filled from `dump`."""
        import asyncpg

        from shoal.store.db import KEYED_PLANNING
        await asyncio.to_thread(subprocess.run, [
            "pg_restore", "--no-owner", "--dbname", _libpq(url), str(dump)],
            check=True, capture_output=True)
        batches = await asyncpg.connect(_libpq(url))
        await batches.execute(KEYED_PLANNING)
        return cls(batches, await asyncpg.connect(_libpq(url)))

    async def apply(self, tx: Tx) -> None:
        """`tx`: its one self-committing statement, or its statements in a transaction."""
        if tx.autocommit:
            sql, params, _ = tx.statements[0]
            await self.batches.fetchrow(sql, *params)
            return
        async with self.others.transaction():
            for sql, params, many in tx.statements:
                if many:
                    await self.others.executemany(sql, params)
                else:
                    await self.others.execute(sql, *params)

    async def close(self) -> None:
        """Disconnect."""
        await self.batches.close()
        await self.others.close()


class Replay(Workers):
    """The minimal orchestrator: accepts `_floor.py`'s workers and replays recordings."""

    def __init__(self) -> None:
        super().__init__()
        self._arrived: set[str] = set()
        self._wake = asyncio.Event()

    def received(self, results: list[str]) -> None:
        """Results are noted as they come."""
        self._arrived.update(results)
        self._wake.set()

    async def run(self, txs: list[Tx], target: SqliteTarget | PostgresTarget,
                  delay: float) -> float:
        """Replay `txs` on `target`; seconds from the first transaction's start to the last
        one's commit."""
        await self.joined.wait()
        self._arrived.clear()
        started = time.monotonic()
        for tx in txs:
            while not self._arrived.issuperset(tx.triggers):
                self._wake.clear()
                await self._wake.wait()
            await target.apply(tx)
            frames: dict[int, list[tuple[str, float]]] = {}
            for attempt, worker in tx.dispatches:
                frames.setdefault(worker, []).append((attempt, delay))
            for worker, tasks in frames.items():
                await self.workers[worker].send(self.frame(tasks))
            await self.stored(tx)
        return time.monotonic() - started

    def frame(self, tasks: list[tuple[str, float]]) -> str:
        """The frame that sends `tasks` (attempt id, delay) to a worker."""
        return json.dumps({"tasks": tasks})

    async def stored(self, tx: Tx) -> None:
        """`tx` has committed and its dispatches are on their way (the floor's worker needs
        nothing more)."""


class ShoalReplay(Replay):
    """The same replay with Shoal's worker process (`_shoal_worker.py`): the worker protocol's
    frames, and each result acknowledged once the transaction that stored it has committed,
    after that transaction's dispatches (the runtime's order). Between this and Shoal lies the
    control plane's logic alone."""

    def __init__(self) -> None:
        super().__init__()
        self.task_id = str(uuid.uuid4())  # the attempts' task, as the worker sees it
        self._came_on: dict[str, Any] = {}  # the connection each result came on

    async def serve(self, ws: Any) -> None:
        """One worker's connection: registered, then each result noted until it closes."""
        await register(ws)
        self.workers.append(ws)
        if len(self.workers) >= WORKERS:
            self.joined.set()
        with contextlib.suppress(websockets.ConnectionClosed):
            async for raw in ws:
                if (done := results_of(raw)) is not None:
                    for attempt in done:
                        self._came_on[attempt] = ws
                    self.received(done)

    def frame(self, tasks: list[tuple[str, float]]) -> str:
        return execute_frame(tasks, self.task_id)

    async def stored(self, tx: Tx) -> None:
        """Acknowledge the results `tx` stored, each to the worker that sent it."""
        acks: dict[Any, list[str]] = {}
        for attempt in tx.triggers:
            if (ws := self._came_on.pop(attempt, None)) is not None:
                acks.setdefault(ws, []).append(attempt)
        for ws, attempts in acks.items():
            await ws.send(acks_frame(attempts))


@contextlib.asynccontextmanager
async def replay_server(worker: str = "floor") -> AsyncIterator[Replay]:
    """The replaying orchestrator with a worker process connected: `_floor.py`'s (`floor`,
    the durable floor's) or Shoal's own (`shoal`, `_worker.py --untimed`)."""
    if worker == "floor":
        server = Replay()
        async with workers_of(server):
            yield server
        return
    shoal = ShoalReplay()
    async with websockets.serve(shoal.serve, "127.0.0.1", 0, compression=None) as sockets:
        port = next(iter(sockets.sockets)).getsockname()[1]
        async with worker_process(f"http://127.0.0.1:{port}", WORKERS):
            async with asyncio.timeout(60):
                await shoal.joined.wait()
            yield shoal
