"""Alembic environment: runs on the connection Shoal hands it (see store/db.py)."""

from __future__ import annotations

from alembic import context

from shoal.store.models import Base

target_metadata = Base.metadata


def run_migrations_online() -> None:
    """Migrate using the connection put in `config.attributes['connection']`."""
    connection = context.config.attributes.get("connection")
    if connection is None:
        raise RuntimeError("Run migrations through `shoal db upgrade`, not the alembic CLI.")
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


run_migrations_online()
