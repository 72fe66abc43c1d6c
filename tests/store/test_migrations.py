"""Migrations build exactly the schema the models declare, on SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from shoal.store.db import Database
from shoal.store.models import Base


def _schema(sync_conn: sa.Connection) -> dict[str, Any]:
    inspector = sa.inspect(sync_conn)
    return {
        table: {
            "columns": [c["name"] for c in inspector.get_columns(table)],
            "indexes": sorted(i["name"] or "" for i in inspector.get_indexes(table)),
        }
        for table in sorted(inspector.get_table_names())
    }


def _revision(sync_conn: sa.Connection) -> str | None:
    return MigrationContext.configure(sync_conn).get_current_revision()


def _diff(sync_conn: sa.Connection) -> list[Any]:
    context = MigrationContext.configure(sync_conn, opts={"compare_type": True})
    return list(compare_metadata(context, Base.metadata))


async def test_migrating_twice_changes_nothing(db: Database) -> None:
    """A second upgrade on a migrated database leaves the revision and the schema alone."""
    async with db.connection() as conn:
        before = await conn.run_sync(_schema)
        revision = await conn.run_sync(_revision)
    await db.migrate()
    async with db.connection() as conn:
        assert await conn.run_sync(_schema) == before
        assert await conn.run_sync(_revision) == revision
    assert revision is not None


async def test_migrated_schema_matches_the_models(db: Database) -> None:
    """Alembic's autogenerate finds no difference between the migrated schema and the models."""
    async with db.connection() as conn:
        diff = await conn.run_sync(_diff)
    assert diff == []
