"""docs/deploy.md's backup and restore procedure, for real: a control plane and a worker on a
fresh PostgreSQL database complete a task that writes files and reads an upload; while the
server runs, deploy/backup.sh dumps the database (pg_dump -Fc) and archives the data folder;
the database is dropped and the data folder deleted; deploy/restore.sh creates the database,
runs pg_restore, unpacks the files and checks them; a new control plane on the restored
database and folder serves the same tasks, subtasks, files, zip and upload, byte for byte."""

from __future__ import annotations

import asyncio
import io
import shutil
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
from tests.runtime.harness import echo_worker, login, subtask_detail, task_detail, wait_for_status

pytestmark = pytest.mark.postgres

BACKUP, RESTORE = DEPLOY / "backup.sh", DEPLOY / "restore.sh"
PG_BIN = Path("/usr/bin")  # PostgreSQL 15's client, as on the server
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


async def run_script(script: Path, *args: str, url: str, data_dir: Path,
                     expect: int = 0) -> tuple[str, str]:
    """Run one of deploy/'s scripts as docs/deploy.md does, with the control plane's
    SHOAL_DATABASE_URL and SHOAL_DATA_DIR and nothing else of this process's environment."""
    env = {"PATH": f"{PG_BIN}:/usr/local/bin:/bin", "HOME": str(data_dir.parent),
           "LC_ALL": "C", "SHOAL_DATABASE_URL": url, "SHOAL_DATA_DIR": str(data_dir)}
    proc = await asyncio.create_subprocess_exec(
        "sh", str(script), *args, env=env, stdout=asyncio.subprocess.PIPE,
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
                # The backup, while the control plane runs (docs/deploy.md).
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
        damaged, broken = tmp_path / "damaged.files.tar.gz", ""
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
        _, err = await run_script(RESTORE, "--replace", dump, str(damaged), url=url,
                                  data_dir=data_dir, expect=2)
        assert f"{broken}: FAILED" in err
        assert "missing or damaged" in err
    finally:
        await drop_postgres(url, POSTGRES_URL)
