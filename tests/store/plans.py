"""SQLite's plan for each statement a store function sends (`EXPLAIN QUERY PLAN`): for the
tests that pin which index a read across tasks takes, so that it does not grow with the
history."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, create_async_engine

from shoal.store.db import Database


async def migrated_sqlite(path: Path) -> str:
    """A migrated SQLite database at `path`; its URL."""
    url = f"sqlite+aiosqlite:///{path}"
    db = Database.connect(url)
    await db.migrate()
    await db.dispose()
    return url


async def plans_of(url: str, run: Callable[[AsyncConnection], Awaitable[Any]]) -> list[str]:
    """Run `run` in a transaction on the SQLite database at `url`; then each statement it sent,
    in order, as the plan SQLite gives it (its lines joined by ' | ')."""
    engine = create_async_engine(url)
    sent: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any,
               executemany: bool) -> None:
        sent.append((statement, parameters))
    sa.event.listen(engine.sync_engine, "before_cursor_execute", record)
    try:
        async with engine.begin() as conn:
            await run(conn)
        sa.event.remove(engine.sync_engine, "before_cursor_execute", record)
        async with engine.connect() as conn:
            return [" | ".join(str(row[-1]) for row in (await conn.exec_driver_sql(
                f"EXPLAIN QUERY PLAN {statement}", parameters)).all())
                for statement, parameters in sent]
    finally:
        await engine.dispose()
