"""Back up and restore an embedded Shoal (SQLite) while it runs (docs/guides/backup.md).
PostgreSQL's procedure is `deploy/backup.sh`'s own (pg_dump); for SQLite that script,
`deploy/restore.sh` and the `shoal backup` and `shoal restore` commands all come here.

A backup is a pair with one stamp, made in this order:

1. `shoal-STAMP.db`: one consistent snapshot of the database, by SQLite's online backup API.
   The server keeps writing meanwhile: in WAL mode a reader's snapshot is not disturbed by
   writers, and the copy is taken in one step, so it is never restarted by one.
2. `shoal-STAMP.files.tar.gz`: the data folder (the artifact store, workflows, the embedded
   mode's key) without the live database, the store's scratch space and the local worker's
   folders (its workspaces, outbox and model journal: a worker's, and rewritten as it runs,
   where the control plane's files are written once). A file is stored
   before the row naming it is committed, so every file the snapshot names is in the folder
   by now; files stored after the snapshot come along unnamed, and are harmless.

Each is written under a `.part` name and renamed when complete. A restore checks the snapshot
first (`PRAGMA integrity_check`), changes nothing unless the database and the data folder are
absent or empty (or `replace` is given), unpacks the files, puts the database in place, and
then checks that every file the database names is there with the SHA-256 its name says.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import hashlib
import os
import shutil
import sqlite3
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from shoal.config import Settings
from shoal.errors import Conflict, InvalidInput, NotFound

LIVE_SUFFIXES = ("", "-wal", "-shm", "-journal")  # the database's files while it runs
NAMED_FILES = ("SELECT sha256 FROM artifacts UNION SELECT sha256 FROM uploads "
               "UNION SELECT text_sha256 FROM uploads WHERE text_sha256 IS NOT NULL")
BUSY_MS = 30_000  # how long the snapshot waits for a lock SQLite cannot share
WORKER_FOLDERS = ("worker", "journal")  # the local worker's, under the data folder


@dataclass(frozen=True, slots=True)
class Backup:
    """One backup: the database snapshot and the files archive, made together."""

    database: Path
    files: Path


@dataclass(frozen=True, slots=True)
class Restored:
    """What a restore put back: the tasks in the database, the stored files checked."""

    tasks: int
    files: int


def database_path(settings: Settings) -> Path:
    """The SQLite file of `settings`; refused for any other database."""
    url = settings.resolved_database_url
    scheme, _, path = url.partition(":///")
    if not scheme.startswith("sqlite") or not path or path == ":memory:":
        raise InvalidInput(
            "`shoal backup` and `shoal restore` are for the embedded database (SQLite). This "
            "Shoal uses PostgreSQL: back it up with deploy/backup.sh, which runs pg_dump "
            "(docs/guides/backup.md).")
    return Path(path)


async def back_up(settings: Settings, dest: Path, *, stamp: str | None = None) -> Backup:
    """Snapshot the database, then archive the data folder, into `dest` (see above)."""
    stamp = stamp or dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    return await asyncio.to_thread(_back_up, database_path(settings), settings.data_dir,
                                   dest, stamp)


async def restore(settings: Settings, backup: Backup, *, replace: bool = False) -> Restored:
    """Put `backup` in place of this Shoal's database and data folder (stop it first)."""
    return await asyncio.to_thread(_restore, backup, database_path(settings),
                                   settings.data_dir, replace=replace)


# ---- the steps, blocking: each runs in a thread ---------------------------------------------


def _back_up(source: Path, data: Path, dest: Path, stamp: str) -> Backup:
    if not source.is_file():
        raise NotFound(f"No database at {source}: set SHOAL_DATA_DIR (or SHOAL_DATABASE_URL) "
                       "to those of the Shoal to back up.")
    data, dest = data.resolve(), dest.resolve()
    if dest == data or data in dest.parents:
        raise InvalidInput(f"{dest} is inside the data folder it would back up ({data}): "
                           "put backups elsewhere, best on another disk.")
    made = Backup(dest / f"shoal-{stamp}.db", dest / f"shoal-{stamp}.files.tar.gz")
    dest.mkdir(parents=True, exist_ok=True)
    _snapshot(source, made.database)
    _archive(data, made.files, skip={source.resolve()})
    return made


def _restore(backup: Backup, target: Path, data: Path, *, replace: bool) -> Restored:
    for part in (backup.database, backup.files):
        if not part.is_file():
            raise NotFound(f"No backup file at {part}.")
    problem = _integrity(backup.database)
    if problem:
        raise InvalidInput(f"{backup.database} is not a sound SQLite database ({problem}): "
                           "nothing was changed; restore another backup.")
    _make_room(target, data, replace=replace)
    _unpack(backup.files, data)
    _place(backup.database, target)
    return _check(target, data / "artifacts" / "objects")


def _snapshot(source: Path, target: Path) -> None:
    """SQLite's online backup of `source`, checked, as a single file (no WAL) at `target`."""
    part = target.with_name(target.name + ".part")
    part.unlink(missing_ok=True)
    with contextlib.closing(sqlite3.connect(source, timeout=BUSY_MS / 1000)) as src, \
            contextlib.closing(sqlite3.connect(part)) as dst:
        src.backup(dst)  # every page in one step, under one read transaction
        dst.execute("PRAGMA journal_mode=DELETE")  # one self-contained file
        (result,) = dst.execute("PRAGMA quick_check").fetchone()
    if result != "ok":
        part.unlink()
        raise InvalidInput(f"The database snapshot failed its check ({result}).")
    _sync(part)
    part.replace(target)


def _archive(data: Path, target: Path, *, skip: set[Path]) -> None:
    """The data folder as a gzipped tar (paths `./…`), without `skip`'s live database files,
    the store's scratch space and the worker's folders. A file removed while it is read (by
    the sweeper) is left out; objects are never rewritten, so none is read half-written."""
    excluded = {Path(str(path) + suffix) for path in skip for suffix in LIVE_SUFFIXES}
    pruned = {data / "artifacts" / "tmp", *(data / name for name in WORKER_FOLDERS)}
    part = target.with_name(target.name + ".part")
    with tarfile.open(part, "w:gz") as tar:
        for path in _walk(data, prune=pruned):
            if path in excluded:
                continue
            with contextlib.suppress(FileNotFoundError):
                tar.add(path, arcname=f"./{path.relative_to(data)}", recursive=False)
    _sync(part)
    part.replace(target)


def _walk(root: Path, *, prune: set[Path]) -> Iterator[Path]:
    """Every folder and file under `root` (folders first), but those under `prune`."""
    for folder, dirs, files in os.walk(root):
        here = Path(folder)
        dirs[:] = sorted(d for d in dirs if here / d not in prune)
        yield from (here / d for d in dirs)
        yield from (here / f for f in sorted(files))


def _integrity(database: Path) -> str:
    """'' when `database` passes `PRAGMA integrity_check`, else what SQLite found."""
    try:
        read_only = f"{database.resolve().as_uri()}?mode=ro"
        with contextlib.closing(sqlite3.connect(read_only, uri=True)) as conn:
            rows = [row[0] for row in conn.execute("PRAGMA integrity_check")]
    except sqlite3.DatabaseError as exc:
        return str(exc)
    return "" if rows == ["ok"] else "; ".join(rows[:5])


def _make_room(target: Path, data: Path, *, replace: bool) -> None:
    """Refuse (changing nothing) a database that exists or a data folder that holds anything,
    unless `replace`: then remove them first."""
    live = [Path(str(target) + suffix) for suffix in LIVE_SUFFIXES]
    held = data.is_dir() and any(data.iterdir())
    if not replace:
        if any(path.exists() for path in live):
            raise Conflict(f"A database exists at {target}: restore into a new data folder, "
                           "or pass --replace to remove it (stop Shoal first).")
        if held:
            raise Conflict(f"{data} is not empty: restore into an empty folder, or pass "
                           "--replace to empty it (stop Shoal first).")
    for path in live:
        path.unlink(missing_ok=True)
    for entry in data.iterdir() if held else ():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    data.mkdir(parents=True, exist_ok=True)


def _unpack(archive: Path, data: Path) -> None:
    with tarfile.open(archive, "r:gz") as tar:
        tar.extractall(data, filter="data")  # nothing outside `data`, no devices or links out


def _place(snapshot: Path, target: Path) -> None:
    """Copy the snapshot to `target`, whole or not at all."""
    target.parent.mkdir(parents=True, exist_ok=True)
    part = target.with_name(target.name + ".part")
    shutil.copyfile(snapshot, part)
    _sync(part)
    part.replace(target)


def _check(database: Path, objects: Path) -> Restored:
    """The restored database's integrity, and every file it names present and intact."""
    problem = _integrity(database)
    if problem:
        raise InvalidInput(f"The restored database at {database} fails its check: {problem}.")
    with contextlib.closing(sqlite3.connect(database)) as conn:
        named = sorted(row[0] for row in conn.execute(NAMED_FILES))
        (tasks,) = conn.execute("SELECT count(*) FROM tasks").fetchone()
    bad = [name for name in named if _digest(objects / name[:2] / name[2:]) != name]
    if bad:
        raise InvalidInput(
            f"The database and the files are restored, but {len(bad)} of the {len(named)} "
            "files the database names are missing or damaged: " + ", ".join(bad) + ". "
            "docs/guides/backup.md, \"What to check after a restore\", says how to find what names "
            "them.", details=bad)
    return Restored(tasks=int(tasks), files=len(named))


def _digest(path: Path) -> str:
    """The SHA-256 of the file at `path`, or '' when there is none."""
    try:
        with path.open("rb") as handle:
            return hashlib.file_digest(handle, "sha256").hexdigest()
    except FileNotFoundError:
        return ""


def _sync(path: Path) -> None:
    with path.open("rb") as handle:
        os.fsync(handle.fileno())

