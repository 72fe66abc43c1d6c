"""`shoal backup` and `shoal restore`: the embedded database (SQLite) and its data folder,
backed up while Shoal runs and restored into a new folder (shoal.backup; docs/guides/backup.md)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from shoal.cli.base import console, run, settings_from_env
from shoal.config import Settings


def backup(
    dest: Annotated[Path, typer.Argument(help="Folder to write the backup into.")],
    stamp: Annotated[str | None, typer.Option(
        help="Name the pair shoal-STAMP.*; default: the time, UTC.")] = None,
) -> None:
    """Back up this Shoal's SQLite database and data folder while it runs (SHOAL_DATA_DIR);
    prints the two files written. PostgreSQL: deploy/backup.sh."""
    from shoal.backup import back_up

    made = run(lambda: back_up(_settings(), dest, stamp=stamp))
    console.print(str(made.database), soft_wrap=True, markup=False, highlight=False)
    console.print(str(made.files), soft_wrap=True, markup=False, highlight=False)


def restore(
    database: Annotated[Path, typer.Argument(help="The backup's shoal-STAMP.db.")],
    files: Annotated[Path, typer.Argument(help="The backup's shoal-STAMP.files.tar.gz.")],
    replace: Annotated[bool, typer.Option(
        "--replace", help="Remove the database and empty the data folder first.")] = False,
) -> None:
    """Restore a backup of `shoal backup` into SHOAL_DATA_DIR (Shoal stopped), and check that
    the database is sound and every file it names is there, intact."""
    from shoal.backup import Backup
    from shoal.backup import restore as restore_backup

    settings = _settings()
    done = run(lambda: restore_backup(settings, Backup(database, files), replace=replace))
    console.print(f"Restored into {settings.data_dir} (tasks: {done.tasks}); {done.files} "
                  "stored files present and intact.", soft_wrap=True, markup=False,
                  highlight=False)


def _settings() -> Settings:
    """The database and the data folder are all it reads: no secret key is needed (the
    production mode's check on it applies only when SHOAL_MODE says production)."""
    return settings_from_env(mode=os.environ.get("SHOAL_MODE", "dev"))
