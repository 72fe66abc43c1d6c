"""`shoal user`, `shoal token` and `shoal db`: administration against the database the
settings name (no control plane needed)."""

from __future__ import annotations

import os
import sys
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

import typer

from shoal.cli.base import T, console, run, settings_from_env
from shoal.config import Settings

user_app = typer.Typer(help="Manage user accounts.", no_args_is_help=True)
token_app = typer.Typer(help="Manage worker tokens.", no_args_is_help=True)
db_app = typer.Typer(help="Database maintenance.", no_args_is_help=True)


def _with_db(fn: Callable[[Any, Settings], Awaitable[T]]) -> T:
    from shoal.store.db import Database

    settings = settings_from_env(mode=os.environ.get("SHOAL_MODE", "dev"))

    async def go() -> T:
        db = Database.connect(settings.resolved_database_url)
        try:
            await db.migrate()
            return await fn(db, settings)
        finally:
            await db.dispose()

    return run(go)


@user_app.command("create")
def user_create(
    username: Annotated[str, typer.Option()],
    password: Annotated[str, typer.Option(prompt=True, hide_input=True)],
    is_admin: Annotated[bool, typer.Option("--admin", help="Grant admin rights.")] = False,
) -> None:
    """Create a user account."""
    from shoal import admin

    user_id = _with_db(lambda db, s: admin.create_user(db, s, username=username,
                                                       password=password, admin=is_admin))
    console.print(f"Created user {username} ({user_id}){' as admin' if is_admin else ''}.")


@token_app.command("create")
def token_create(
    worker_name: Annotated[str, typer.Option("--worker", help="Which worker it is for.")],
) -> None:
    """Create a worker token; prints the token alone on stdout."""
    from shoal import admin

    token = _with_db(lambda db, s: admin.create_worker_token(db, name=worker_name))
    sys.stdout.write(token + "\n")


@db_app.command("upgrade")
def db_upgrade() -> None:
    """Migrate the database to the newest schema."""

    async def noop(db: Any, settings: Settings) -> str:
        return settings.resolved_database_url.split("@")[-1]

    where = _with_db(noop)
    console.print(f"Database is at the newest schema ({where}).")
