"""SQLite reads on the event loop's own thread (ADR 0047).

A read through SQLAlchemy's asyncio engine on aiosqlite hands every step to a thread of its own
and back (the connection checked out, the statement, its rows, the rollback that returns it):
0.4 to 0.7 ms of the loop's thread for a user read by its id, where the same `SELECT` on a
plain `sqlite3` connection takes under 10 µs (`benchmarks/read_cost.py`). In WAL mode a reader
never waits for the writer, and SQLite answers the small reads the API and the runtime make in
microseconds, so on SQLite `Database.connection()` hands out an `InlineConnection`: the same
calls as an `AsyncConnection` (`execute`, `scalar`, `scalars`, `exec_driver_sql`, `run_sync`),
run at once on a synchronous connection from a pool of its own. Its rows are read before
`execute` returns, as the async driver's are, so a result may be used after the block. Writes
still go through `Database.begin()` and the runtime's writer (ADR 0014).

A reader waits at most `READ_BUSY_TIMEOUT_MS` for one of the brief locks a WAL reader can meet
(SQLite's recovery of a WAL after a crash, say), rather than the writers' ten seconds: the loop
waits with it.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, TypeVar

import sqlalchemy as sa

T = TypeVar("T")
READ_BUSY_TIMEOUT_MS = 1000
KEPT = 10  # idle connections the pool keeps; more are opened when more readers overlap


class InlineConnection:
    """An `AsyncConnection`'s read calls, answered on the calling thread."""

    __slots__ = ("sync_connection",)

    def __init__(self, conn: sa.Connection) -> None:
        self.sync_connection = conn

    @property
    def dialect(self) -> sa.Dialect:
        return self.sync_connection.dialect

    async def execute(self, statement: Any, parameters: Any = None, *,
                      execution_options: Mapping[str, Any] | None = None) -> Any:
        return _buffered(self.sync_connection.execute(
            statement, parameters, execution_options=execution_options))

    async def scalar(self, statement: Any, parameters: Any = None, *,
                     execution_options: Mapping[str, Any] | None = None) -> Any:
        return self.sync_connection.scalar(statement, parameters,
                                           execution_options=execution_options)

    async def scalars(self, statement: Any, parameters: Any = None, *,
                      execution_options: Mapping[str, Any] | None = None) -> Any:
        return (await self.execute(statement, parameters,
                                   execution_options=execution_options)).scalars()

    async def exec_driver_sql(self, statement: str, parameters: Any = None) -> Any:
        return _buffered(self.sync_connection.exec_driver_sql(statement, parameters))

    async def run_sync(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return fn(self.sync_connection, *args, **kwargs)

    async def commit(self) -> None:
        self.sync_connection.commit()

    async def rollback(self) -> None:
        self.sync_connection.rollback()


def _buffered(result: Any) -> Any:
    """`result` with its rows already read (a statement that returns none is closed already),
    so that it outlives its connection's return to the pool."""
    if not result.returns_rows:
        return result
    return result.freeze()()


class InlineReads:
    """A pool of synchronous SQLite connections for `InlineConnection`s."""

    def __init__(self, url: str, *, json_serializer: Callable[[Any], str],
                 pragmas: Callable[[Any, Any], None]) -> None:
        # More readers than `KEPT` at once open more connections rather than wait: a reader
        # that waited here would hold up the very loop that must free a connection.
        self.engine = sa.create_engine(
            url, pool_size=KEPT, max_overflow=-1, json_serializer=json_serializer,
            hide_parameters=True, connect_args={"check_same_thread": False})
        sa.event.listen(self.engine, "connect", pragmas)
        sa.event.listen(self.engine, "connect", _reader_pragmas)

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[InlineConnection]:
        """A connection for reads; its transaction rolls back when the block ends."""
        conn = self.engine.connect()
        try:
            yield InlineConnection(conn)
        finally:
            conn.close()

    def dispose(self) -> None:
        self.engine.dispose()


def _reader_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute(f"PRAGMA busy_timeout={READ_BUSY_TIMEOUT_MS}")
    cur.close()
