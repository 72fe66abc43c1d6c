"""Migrations build exactly the schema the models declare, on SQLite and PostgreSQL."""

from __future__ import annotations

import uuid
from typing import Any

import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from shoal.states import LIVE_ATTEMPT_VALUES
from shoal.store import queries
from shoal.store.db import Database, alembic_config
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


LOOKUPS = {  # what the store searches on, and the index that must serve it
    "SELECT id FROM subtasks WHERE task_id = :v": "task_id",
    "SELECT id FROM attempts WHERE subtask_id = :v ORDER BY fence": "subtask_id",
    "SELECT id FROM attempts WHERE task_id = :v": "task_id",
    "SELECT id FROM attempts WHERE worker_id = :v": "worker_id",
}


async def test_every_lookup_has_an_index(db: Database) -> None:
    """Migration 0004 dropped indexes no query used; the lookups the store makes still find
    an index (the unique (task_id, key) and (subtask_id, fence) ones lead with those columns)
    instead of scanning the table."""
    async with db.connection() as conn:
        if db.is_postgres:
            await conn.exec_driver_sql("SET enable_seqscan = off")  # tiny tables: force the issue
        for sql, column in LOOKUPS.items():
            explain = "EXPLAIN " if db.is_postgres else "EXPLAIN QUERY PLAN "
            stmt = sa.text(explain + sql).bindparams(sa.bindparam("v", type_=sa.Uuid))
            rows = (await conn.execute(stmt, {"v": uuid.uuid4()})).all()
            plan = " ".join(str(part) for row in rows for part in row)
            assert "Index" in plan or "INDEX" in plan, (sql, plan)
            assert column in plan.split("INDEX", 1)[-1].split("Index", 1)[-1], (sql, plan)


def _plan(conn: sa.Connection, query: sa.Select[Any]) -> str:
    """The database's plan for `query`, its parameters written in as literals."""
    sql = str(query.compile(dialect=conn.dialect,
                            compile_kwargs={"literal_binds": True, "render_postcompile": True}))
    explain = "EXPLAIN " if conn.dialect.name == "postgresql" else "EXPLAIN QUERY PLAN "
    return " ".join(str(part) for row in conn.exec_driver_sql(explain + sql) for part in row)


async def test_live_attempts_have_an_index_of_their_own(db: Database) -> None:
    """Migration 0012: `ix_attempts_live` holds the live attempts alone (a partial index), and
    the query for them (`queries.LIVE`: the statuses as literals, in the index's order) finds
    them through it, where the same statuses as parameters cannot."""
    attempts = Base.metadata.tables["attempts"]
    async with db.connection() as conn:
        if db.is_postgres:
            await conn.exec_driver_sql("SET enable_seqscan = off")  # tiny tables: force the issue
            found = "SELECT indexdef FROM pg_indexes WHERE indexname = 'ix_attempts_live'"
        else:
            found = "SELECT sql FROM sqlite_master WHERE name = 'ix_attempts_live'"
        definition = (await conn.exec_driver_sql(found)).scalar_one()
        assert "WHERE" in definition.upper()
        assert "dispatched" in definition
        assert "running" in definition
        live = await conn.run_sync(_plan, sa.select(attempts.c.id).where(queries.LIVE))
        assert "ix_attempts_live" in live, live
        if not db.is_postgres:  # (SQLite never matches a parameter against the condition)
            as_parameters = sa.select(attempts.c.id).where(
                attempts.c.status.in_(sa.bindparam("s", list(LIVE_ATTEMPT_VALUES),
                                                   expanding=True)))
            sql = str(as_parameters.compile(dialect=conn.dialect,
                                            compile_kwargs={"render_postcompile": True}))
            plan = (await conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql,
                                               tuple(LIVE_ATTEMPT_VALUES))).all()
            assert "ix_attempts_live" not in str(plan), plan


async def test_checkpoints_made_before_migration_0014_take_their_tasks_user(
        database_url: str) -> None:
    """A checkpoint stored before its rows named a user gets its task's user from migration
    0014, so the user's checkpoint list, read by that column, still shows it."""
    db = Database.connect(database_url)
    try:
        def upgrade_to(target: str) -> Any:
            def run(sync_conn: sa.Connection) -> None:
                cfg = alembic_config()
                cfg.attributes["connection"] = sync_conn
                command.upgrade(cfg, target)
            return run
        async with db.engine.begin() as conn:
            await conn.run_sync(upgrade_to("0013"))
        user, task, point = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
        async with db.engine.begin() as conn:
            await conn.execute(sa.text(
                "INSERT INTO users (id, username, password_hash, is_admin, created_at) "
                "VALUES (:id, 'alice', 'x', false, '2026-01-01 00:00:00')"), {"id": _key(db, user)})
            await conn.execute(sa.text(
                "INSERT INTO tasks (id, user_id, description, workflow, status, progress, "
                "checkpoint_frequency, privacy_level, tool_preferences, metadata, input_tokens, "
                "output_tokens, cost_usd, created_at, updated_at, version) VALUES (:id, :user, "
                "'t', 'dag', 'checkpoint', 0, 'low', 'normal', '[]', '{}', 0, 0, 0, "
                "'2026-01-01 00:00:00', '2026-01-01 00:00:00', 1)"),
                {"id": _key(db, task), "user": _key(db, user)})
            await conn.execute(sa.text(
                "INSERT INTO checkpoints (id, task_id, reason, status, data, created_at, "
                "version) VALUES (:id, :task, 'approval_request', 'pending_review', '{}', "
                "'2026-01-01 00:00:00', 1)"), {"id": _key(db, point), "task": _key(db, task)})
        await db.migrate()
        async with db.connection() as conn:
            rows, total = await queries.list_checkpoints(
                conn, user_id=user, task_id=None, status=None, limit=20, offset=0)
        assert (total, [r.id for r in rows]) == (1, [point])
    finally:
        await db.dispose()


def _key(db: Database, value: uuid.UUID) -> str:
    """`value` as the database stores a UUID: 32 hex digits on SQLite, the text on PostgreSQL."""
    return str(value) if db.is_postgres else value.hex
