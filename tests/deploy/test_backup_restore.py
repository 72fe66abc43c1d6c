"""docs/guides/backup.md's backup and restore procedure, for real, for both databases.

PostgreSQL: a control plane and a worker on a fresh database complete a task that writes files
and reads an upload; while the server runs, deploy/backup.sh dumps the database (pg_dump -Fc)
and archives the data folder; the database is dropped and the data folder deleted;
deploy/restore.sh creates the database, runs pg_restore, unpacks the files and checks them; a
new control plane on the restored database and folder serves the same tasks, subtasks, files,
zip and upload, byte for byte.

SQLite (the embedded database): the same scripts, through `shoal backup` and `shoal restore`,
while the server runs with a task in flight and more tasks being submitted and run; restored
into a new data folder, the database passes `PRAGMA integrity_check`, a control plane on it
serves the same user, task, files, zip and upload, and finishes the task that was in flight."""

from __future__ import annotations

import asyncio
import io
import shutil
import sqlite3
import sys
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from shoal.api.server import running_server
from shoal.store.db import Database
from tests.conftest import (
    IN_CI,
    POSTGRES_URL,
    drop_postgres,
    fresh_postgres,
    make_settings,
    require_service,
)
from tests.deploy.stack import DEPLOY
from tests.runtime.harness import (
    DEADLINE,
    GatedEcho,
    echo_worker,
    login,
    subtask_detail,
    task_detail,
    wait_for_status,
)

BACKUP, RESTORE = DEPLOY / "backup.sh", DEPLOY / "restore.sh"
PG_BIN = Path("/usr/bin")  # PostgreSQL 15's client, as on the server
SHOAL_BIN = Path(sys.executable).parent  # the `shoal` the scripts run for SQLite
NOTES = b"# Field notes\n\nTwelve cats in Oslo, nine in Bergen.\n"
FILES = {  # what the task's subtasks write: text, nested paths, a name beyond ASCII, shared bytes
    "write": {"report.md": "# Report\n\nCats: 21.\n", "data/counts.csv": "city,cats\nOslo,12\n",
              "same.txt": "the same bytes in two subtasks\n"},
    "more": {"again.txt": "the same bytes in two subtasks\n", "notes/übersicht.md": "Ü\n"},
}


def require_pg_tools() -> None:
    """pg_dump, pg_restore and psql of /usr/bin; skip without them, fail under CI."""
    missing = [n for n in ("pg_dump", "pg_restore", "psql") if not (PG_BIN / n).is_file()]
    if not missing:
        return
    message = (f"{', '.join(missing)} not in {PG_BIN}: install PostgreSQL's client "
               "(Debian's postgresql-client) to test the backup procedure.")
    if IN_CI:
        pytest.fail(message)
    pytest.skip(message)


async def run_script(script: Path, *args: str, url: str | None, data_dir: Path,
                     expect: int = 0) -> tuple[str, str]:
    """Run one of deploy/'s scripts as docs/guides/backup.md does, with the control plane's
    SHOAL_DATABASE_URL (None: unset, the embedded SQLite) and SHOAL_DATA_DIR and nothing else
    of this process's environment; `shoal` is on PATH (this virtual environment's)."""
    env = {"PATH": f"{SHOAL_BIN}:{PG_BIN}:/usr/local/bin:/bin", "HOME": str(data_dir.parent),
           "LC_ALL": "C", "SHOAL_DATA_DIR": str(data_dir)}
    if url is not None:
        env["SHOAL_DATABASE_URL"] = url
    proc = await asyncio.create_subprocess_exec(
        "sh", str(script), *args, env=env, cwd=data_dir.parent, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode == expect, f"{script.name} exited {proc.returncode}: {err.decode()}"
    return out.decode(), err.decode()


async def database_exists(url: str) -> bool:
    name = url.rsplit("/", 1)[1]
    db = Database.connect(POSTGRES_URL)
    try:
        async with db.engine.connect() as conn:
            found = await conn.execute(sa.text("SELECT 1 FROM pg_database WHERE datname = :n"),
                                       {"n": name})
            return found.first() is not None
    finally:
        await db.dispose()


async def fresh_database(url: str) -> None:
    """An empty database of `url`'s name (as the server it replaces would have)."""
    db = Database.connect(POSTGRES_URL)
    try:
        async with db.engine.connect() as conn:
            await conn.execution_options(isolation_level="AUTOCOMMIT")
            await conn.execute(sa.text(f'CREATE DATABASE "{url.rsplit("/", 1)[1]}"'))
    finally:
        await db.dispose()


def damage_page(database: Path, damaged: Path) -> None:
    """Copy the SQLite file `database` to `damaged` with its second page overwritten."""
    raw = bytearray(database.read_bytes())
    raw[4096:8192] = b"\xff" * 4096
    damaged.write_bytes(bytes(raw))


def damage_notes(files: Path, damaged: Path) -> str:
    """Copy the files archive `files` to `damaged` with NOTES's object changed; its name
    under artifacts/objects (`ab/cdef…`)."""
    broken = ""
    with tarfile.open(files) as source, tarfile.open(damaged, "w:gz") as target:
        for member in source.getmembers():
            data = source.extractfile(member) if member.isfile() else None
            if data is not None and member.name.startswith("./artifacts/objects/"):
                content = data.read()
                if content == NOTES:
                    content = NOTES.replace(b"Twelve", b"Eleven")
                    broken = member.name.removeprefix("./artifacts/objects/")
                data = io.BytesIO(content)
            target.addfile(member, data)
    assert broken, "the archive holds NOTES"
    return broken


async def snapshot(client: httpx.AsyncClient, task_id: str) -> dict[str, Any]:
    """Everything a user sees of the task and their upload: the task list, the task, each
    subtask with its attempts, each file's bytes, the task's zip and the account export (but
    its export time)."""
    detail = await task_detail(client, task_id)
    subtasks, files = {}, {}
    for sub in detail["subtasks"]:
        sid = sub["subtask_id"]
        subtasks[sid] = await subtask_detail(client, sid)
        listing = await client.get(f"/api/v1/subtasks/{sid}/files")
        assert listing.status_code == 200, listing.text
        for entry in listing.json()["files"]:
            got = await client.get(f"/api/v1/subtasks/{sid}/files/{entry['path']}")
            assert got.status_code == 200, got.text
            files[(sub["name"], entry["path"])] = (entry["sha256"], got.content)
    archive = await client.get(f"/api/v1/tasks/{task_id}/download")
    assert archive.status_code == 200, archive.text
    export = await client.get("/api/v1/export")
    assert export.status_code == 200, export.text
    with zipfile.ZipFile(io.BytesIO(export.content)) as zipped:
        exported = {n: zipped.read(n) for n in zipped.namelist() if n != "account.json"}
    tasks = await client.get("/api/v1/tasks")
    uploads = await client.get("/api/v1/uploads")
    return {"tasks": tasks.json(), "detail": detail, "subtasks": subtasks, "files": files,
            "zip": archive.content, "export": exported, "uploads": uploads.json()}


@pytest.mark.postgres
async def test_a_backup_restores_the_tasks_and_their_files(tmp_path: Path) -> None:
    """Back up while serving, lose the database and the files, restore both: the restored
    control plane serves exactly what it served before."""
    require_service(POSTGRES_URL, "PostgreSQL", "SHOAL_TEST_POSTGRES_URL")
    require_pg_tools()
    url = await fresh_postgres(POSTGRES_URL)
    data_dir = tmp_path / "server"
    settings = make_settings(tmp_path, database_url=url, data_dir=data_dir)
    worker_settings = make_settings(tmp_path, data_dir=tmp_path / "worker")
    backups = tmp_path / "backups"
    try:
        async with running_server(settings) as srv:
            client = await login(srv, settings)
            try:
                uploaded = await client.post("/api/v1/uploads",
                                             files=[("file", ("notes.md", NOTES))])
                assert uploaded.status_code == 201, uploaded.text
                (upload,) = uploaded.json()["uploads"]
                async with echo_worker(srv, worker_settings):
                    created = await client.post("/api/v1/tasks", json={
                        "description": "Count the cats", "sources": [upload["upload_id"]],
                        "plan": [
                            {"name": "write", "description": "write", "tool": "echo",
                             "options": {"files": FILES["write"]}},
                            {"name": "more", "description": "more", "tool": "echo",
                             "dependencies": ["write"], "options": {"files": FILES["more"]}},
                        ]})
                    assert created.status_code == 201, created.text
                    task_id = created.json()["task_id"]
                    await wait_for_status(client, task_id, "completed")
                before = await snapshot(client, task_id)
                # The backup, while the control plane runs (docs/guides/backup.md).
                out, _ = await run_script(BACKUP, str(backups), url=url, data_dir=data_dir)
            finally:
                await client.aclose()
        assert {key: data for key, (_, data) in before["files"].items()} == {
            (name, path): text.encode() for name, files in FILES.items()
            for path, text in files.items()}
        dump, files = (Path(line) for line in out.split())
        assert dump.name.endswith(".dump")
        assert dump.read_bytes()[:5] == b"PGDMP", "pg_dump's custom format"
        assert files.name.endswith(".files.tar.gz")
        assert sorted(p.name for p in backups.iterdir()) == sorted([dump.name, files.name])

        objects = {p.relative_to(data_dir): p.read_bytes()
                   for p in (data_dir / "artifacts" / "objects").glob("*/*")}
        # The disaster: the database and every stored file are gone.
        await drop_postgres(url, POSTGRES_URL)
        shutil.rmtree(data_dir)

        out, _ = await run_script(RESTORE, str(dump), str(files), url=url, data_dir=data_dir)
        assert f"restored (tasks: 1); {len(objects)} stored files present and intact" in out
        assert {p.relative_to(data_dir): p.read_bytes()
                for p in (data_dir / "artifacts" / "objects").glob("*/*")} == objects
        assert not (data_dir / "artifacts" / "tmp").exists() or not any(
            (data_dir / "artifacts" / "tmp").iterdir())

        async with running_server(settings) as srv, httpx.AsyncClient(
                base_url=srv.url, timeout=30) as client:
            ready = await client.get("/readyz")
            assert ready.status_code == 200, ready.text
            signed_in = await client.post("/api/v1/auth/login", json={
                "username": "alice", "password": "password123"})
            assert signed_in.status_code == 200, signed_in.text
            client.headers["Authorization"] = f"Bearer {signed_in.json()['access_token']}"
            after = await snapshot(client, task_id)
        assert after["detail"]["status"] == "completed"
        for part in ("tasks", "detail", "subtasks", "files", "zip", "uploads", "export"):
            assert after[part] == before[part], part
    finally:
        await drop_postgres(url, POSTGRES_URL)


@pytest.mark.postgres
async def test_restore_refuses_to_overwrite_unless_told(tmp_path: Path) -> None:
    """Without --replace, restore.sh changes nothing when the database exists or the data
    folder holds anything; with it, it replaces both. A damaged file in an archive is named
    and fails the restore."""
    require_service(POSTGRES_URL, "PostgreSQL", "SHOAL_TEST_POSTGRES_URL")
    require_pg_tools()
    url = await fresh_postgres(POSTGRES_URL)
    data_dir = tmp_path / "server"
    settings = make_settings(tmp_path, database_url=url, data_dir=data_dir)
    try:
        async with running_server(settings) as srv:
            client = await login(srv, settings)
            try:
                uploaded = await client.post("/api/v1/uploads",
                                             files=[("file", ("notes.md", NOTES))])
                assert uploaded.status_code == 201, uploaded.text
            finally:
                await client.aclose()
        out, _ = await run_script(BACKUP, str(tmp_path / "b"), url=url, data_dir=data_dir)
        dump, files = out.split()
        _, err = await run_script(RESTORE, dump, files, url=url, data_dir=data_dir, expect=2)
        assert f"database {url.rsplit('/', 1)[1]} exists" in err
        await drop_postgres(url, POSTGRES_URL)
        _, err = await run_script(RESTORE, dump, files, url=url, data_dir=data_dir, expect=2)
        assert f"{data_dir} is not empty" in err
        assert not await database_exists(url), "a refused restore changes nothing"
        stray = data_dir / "artifacts" / "objects" / "stray"
        stray.write_bytes(b"left from before")
        await fresh_database(url)
        out, _ = await run_script(RESTORE, "--replace", dump, files, url=url, data_dir=data_dir)
        assert "restored (tasks: 0); 1 stored files present and intact" in out
        assert not stray.exists(), "--replace empties the data folder first"
        # An archive with a damaged object: the check names it, and the restore fails.
        damaged = tmp_path / "damaged.files.tar.gz"
        broken = damage_notes(Path(files), damaged)
        _, err = await run_script(RESTORE, "--replace", dump, str(damaged), url=url,
                                  data_dir=data_dir, expect=2)
        assert f"{broken}: FAILED" in err
        assert "missing or damaged" in err
    finally:
        await drop_postgres(url, POSTGRES_URL)


# ---- SQLite: the embedded database -------------------------------------------------------------


def integrity(database: Path) -> list[str]:
    """What `PRAGMA integrity_check` says of a SQLite file (["ok"] when sound)."""
    conn = sqlite3.connect(f"file:{database}?mode=ro", uri=True)
    try:
        return [row[0] for row in conn.execute("PRAGMA integrity_check")]
    finally:
        conn.close()


async def submit(client: httpx.AsyncClient, description: str,
                 plan: list[dict[str, Any]]) -> str:
    created = await client.post("/api/v1/tasks", json={"description": description,
                                                       "plan": plan})
    assert created.status_code == 201, created.text
    return str(created.json()["task_id"])


async def test_a_running_embedded_shoal_backs_up_and_restores(tmp_path: Path) -> None:
    """Back up SQLite while the server runs a held task and more are submitted and run;
    restore into a new folder: a sound database, and a control plane on it serving the same
    user, task, files, zip and upload, which then finishes every task it had."""
    data_dir, backups = tmp_path / "server", tmp_path / "backups"
    # One instance id, as an operator restoring onto a new machine sets: the restored copy
    # takes its tasks back at once instead of after the claim's time to live.
    settings = make_settings(tmp_path, data_dir=data_dir, instance_id="embedded")
    worker_settings = make_settings(tmp_path, data_dir=tmp_path / "worker")
    gated = GatedEcho()
    async with running_server(settings) as srv:
        client = await login(srv, settings)
        try:
            uploaded = await client.post("/api/v1/uploads", files=[("file", ("notes.md", NOTES))])
            assert uploaded.status_code == 201, uploaded.text
            async with echo_worker(srv, worker_settings, tools={"echo": gated}, slots=4):
                done_id = await submit(client, "Count the cats", [
                    {"name": "write", "description": "write", "tool": "echo",
                     "options": {"files": FILES["write"]}},
                    {"name": "more", "description": "more", "tool": "echo",
                     "dependencies": ["write"], "options": {"files": FILES["more"]}}])
                await wait_for_status(client, done_id, "completed")
                before = await snapshot(client, done_id)
                held_id = await submit(client, "Held while backing up", [
                    {"name": "first", "description": "first", "tool": "echo",
                     "options": {"files": {"first.txt": "before the backup\n"}}},
                    {"name": "held", "description": "held", "tool": "echo",
                     "dependencies": ["first"], "options": {"gated": True}}])
                await asyncio.wait_for(gated.started.wait(), timeout=DEADLINE)
                # The backup, in its own process, while this one submits and runs tasks.
                backing_up = asyncio.create_task(
                    run_script(BACKUP, str(backups), url=None, data_dir=data_dir))
                busy: list[str] = []  # one after another, so that writes go on throughout
                while not backing_up.done() and len(busy) < 100:
                    n = len(busy)
                    busy.append(await submit(client, f"Busy {n}", [
                        {"name": "w", "description": "w", "tool": "echo",
                         "options": {"files": {f"busy-{n}.txt": f"written meanwhile {n}\n"}}}]))
                    await wait_for_status(client, busy[-1], "completed")
                out, _ = await backing_up
                assert (await task_detail(client, held_id))["status"] == "in_progress"
        finally:
            await client.aclose()
    database, files = (Path(line) for line in out.split())
    assert database.name.endswith(".db")
    assert files.name.endswith(".files.tar.gz")
    assert sorted(p.name for p in backups.iterdir()) == sorted([database.name, files.name])
    assert integrity(database) == ["ok"]
    with tarfile.open(files) as archive:
        names = archive.getnames()
    assert "./shoal.db" not in names, "the live database is not archived"
    assert not [n for n in names if n.startswith(("./artifacts/tmp/", "./worker/"))]

    restored_dir = tmp_path / "restored"  # a new, empty data folder
    out, _ = await run_script(RESTORE, str(database), str(files), url=None,
                              data_dir=restored_dir)
    assert "stored files present and intact" in out
    assert integrity(restored_dir / "shoal.db") == ["ok"]

    restored = settings.model_copy(update={"data_dir": restored_dir})
    async with running_server(restored) as srv, httpx.AsyncClient(
            base_url=srv.url, timeout=30) as client:
        assert (await client.get("/readyz")).status_code == 200
        signed_in = await client.post("/api/v1/auth/login", json={
            "username": "alice", "password": "password123"})
        assert signed_in.status_code == 200, signed_in.text
        client.headers["Authorization"] = f"Bearer {signed_in.json()['access_token']}"
        after = await snapshot(client, done_id)
        for part in ("detail", "subtasks", "files", "zip", "uploads"):
            assert after[part] == before[part], part
        page = (await client.get("/api/v1/tasks?limit=200")).json()
        listed = {t["task_id"] for t in page["tasks"]}
        assert {done_id, held_id} <= listed
        assert listed - {done_id, held_id} <= set(busy)
        # A worker again: the task that was in flight, and those queued, run to their end.
        gated.gate.set()
        async with echo_worker(srv, worker_settings, name="w2", tools={"echo": gated}):
            for task_id in listed:
                await wait_for_status(client, task_id, "completed")
        held = await snapshot(client, held_id)
        assert {path for _, path in held["files"]} == {"first.txt"}


def flat(message: str) -> str:
    """A message as one line (the console wraps it to its width)."""
    return " ".join(message.split())


async def shoal(*args: str, data_dir: Path, url: str | None = None,
                expect: int = 0) -> tuple[str, str]:
    """Run the `shoal` command of this virtual environment on `data_dir`."""
    env = {"PATH": f"{SHOAL_BIN}:/usr/bin:/bin", "HOME": str(data_dir.parent), "LC_ALL": "C",
           "SHOAL_DATA_DIR": str(data_dir), "COLUMNS": "200"}
    if url is not None:
        env["SHOAL_DATABASE_URL"] = url
    proc = await asyncio.create_subprocess_exec(
        str(SHOAL_BIN / "shoal"), *args, env=env, cwd=data_dir.parent,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode == expect, f"shoal {args[0]} exited {proc.returncode}: {err.decode()}"
    return out.decode(), err.decode()


async def test_embedded_restore_refuses_to_overwrite_or_restore_damage(tmp_path: Path) -> None:
    """`shoal restore` (through restore.sh) changes nothing when the database exists, the
    folder holds anything, or the snapshot is not a sound database; with --replace it replaces
    both; a damaged file is named and fails the restore. `shoal backup` refuses a destination
    inside the data folder, and PostgreSQL (deploy/backup.sh's pg_dump does that)."""
    data_dir = tmp_path / "server"
    settings = make_settings(tmp_path, data_dir=data_dir)
    async with running_server(settings) as srv:
        client = await login(srv, settings)
        try:
            uploaded = await client.post("/api/v1/uploads", files=[("file", ("notes.md", NOTES))])
            assert uploaded.status_code == 201, uploaded.text
        finally:
            await client.aclose()
    _, err = await shoal("backup", str(data_dir / "backups"), data_dir=data_dir, expect=1)
    assert "inside the data folder" in flat(err)
    _, err = await shoal("backup", str(tmp_path / "b"), data_dir=data_dir, expect=1,
                         url="postgresql://shoal@127.0.0.1/shoal")
    assert "deploy/backup.sh" in flat(err)
    out, _ = await run_script(BACKUP, str(tmp_path / "b"), url=None, data_dir=data_dir)
    database, files = out.split()

    _, err = await run_script(RESTORE, database, files, url=None, data_dir=data_dir, expect=1)
    assert f"A database exists at {data_dir / 'shoal.db'}:" in flat(err)
    other = tmp_path / "other"
    (other / "artifacts").mkdir(parents=True)
    stray = other / "artifacts" / "stray"
    stray.write_bytes(b"left from before")
    _, err = await run_script(RESTORE, database, files, url=None, data_dir=other, expect=1)
    assert f"{other} is not empty" in flat(err)
    assert stray.exists(), "a refused restore changes nothing"
    broken_db = tmp_path / "broken.db"
    damage_page(Path(database), broken_db)
    _, err = await run_script(RESTORE, "--replace", str(broken_db), files, url=None,
                              data_dir=other, expect=1)
    assert "is not a sound SQLite database" in flat(err)
    assert stray.exists(), "a damaged snapshot changes nothing"

    out, _ = await run_script(RESTORE, "--replace", database, files, url=None, data_dir=other)
    assert "(tasks: 0); 1 stored files present and intact" in out
    assert not stray.exists(), "--replace empties the data folder first"
    assert integrity(other / "shoal.db") == ["ok"]
    # An archive with a damaged object: the check names it, and the restore fails.
    damaged = tmp_path / "damaged.files.tar.gz"
    broken = damage_notes(Path(files), damaged).replace("/", "")  # named by its whole hash
    _, err = await run_script(RESTORE, "--replace", database, str(damaged), url=None,
                              data_dir=other, expect=1)
    assert broken in flat(err)
    assert "missing or damaged" in flat(err)
