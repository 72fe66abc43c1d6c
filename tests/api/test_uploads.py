"""Uploads over HTTP: a user's files become a task's sources, in `sources/` of its workspaces;
hostile uploads get their 4xx and leave nothing behind, in the database or the store."""

from __future__ import annotations

import asyncio
import hashlib
import io
import zipfile
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa
import weasyprint  # type: ignore[import-untyped]

from shoal.api.server import RunningServer, running_server
from shoal.config import Settings
from shoal.tools.base import ToolOutcome, ToolRun
from shoal.tools.echo import EchoTool
from tests.artifacts.real_files import write_docx, write_xlsx
from tests.runtime.harness import echo_worker, login, wait_for_status

LIMIT = 256 * 1024  # bytes an upload may hold, in these tests
NOTE = """\
name: note
version: 1
description: One note, which is the report.
roles:
  writer: {prompt: "# A note on {query}", tools: [echo]}
steps:
  - {id: write, kind: agent, role: writer, writes: report}
result: report
"""


class Lister(EchoTool):
    """The echo tool, saying also which files its workspace's `sources/` holds."""

    async def run(self, run: ToolRun) -> ToolOutcome:
        outcome = await super().run(run)
        folder = run.workspace / "sources"
        held = sorted(f"{p.name}={p.stat().st_size}" for p in folder.iterdir()) \
            if folder.is_dir() else []
        return ToolOutcome(status=outcome.status, output=f"{outcome.output}\nheld: {held}")


@pytest.fixture
async def server(settings: Settings) -> AsyncIterator[RunningServer]:
    limited = settings.model_copy(update={"max_upload_bytes": LIMIT,
                                          "max_user_upload_bytes": 4 * LIMIT})
    async with running_server(limited) as srv:
        yield srv


def _pdf() -> bytes:
    return bytes(weasyprint.HTML(string="<h1>Cats of Oslo</h1><p>Twelve.</p>").write_pdf())


async def _upload(client: httpx.AsyncClient, *files: tuple[str, bytes]) -> httpx.Response:
    return await client.post("/api/v1/uploads",
                             files=[("file", (name, data)) for name, data in files])


async def _nothing_left(server: RunningServer, before: tuple[int, set[Path]]) -> None:
    """No upload row more, and no file more in the store, than `before`."""
    assert await _state(server) == before


async def _state(server: RunningServer) -> tuple[int, set[Path]]:
    async with server.services.db.connection() as conn:
        rows = (await conn.execute(sa.text("SELECT count(*) FROM uploads"))).scalar()
    root = server.services.artifacts.root
    return int(rows or 0), {p for p in root.rglob("*") if p.is_file()}


async def test_sources_reach_the_workspace_and_the_report(
    server: RunningServer, client: httpx.AsyncClient,
) -> None:
    """Markdown, CSV and a PDF upload with their kinds; a task given them finds them under
    sources/; a task's instructions name them, so a report (echoed here) lists them."""
    pdf = _pdf()
    resp = await _upload(client, ("notes.md", b"# Notes\n\nCats."),
                         ("counts.csv", b"city,cats\nOslo,12\n"), ("paper.pdf", pdf))
    assert resp.status_code == 201, resp.text
    uploads = resp.json()["uploads"]
    assert [(u["name"], u["kind"]) for u in uploads] == [
        ("notes.md", "markdown"), ("counts.csv", "csv"), ("paper.pdf", "pdf")]
    assert all(u["text_chars"] > 0 for u in uploads)
    async with echo_worker(server, server.services.settings, tools={"echo": Lister()}):
        task = await client.post("/api/v1/tasks", json={
            "description": "Read my files", "sources": [u["upload_id"] for u in uploads],
            "plan": [{"name": "read", "description": "read them", "tool": "echo"}]})
        assert task.status_code == 201, task.text
        task_id = task.json()["task_id"]
        detail = await wait_for_status(client, task_id, "completed")
    assert [s["name"] for s in detail["sources"]] == ["notes.md", "counts.csv", "paper.pdf"]
    sub = (await client.get(f"/api/v1/subtasks/{detail['subtasks'][0]['subtask_id']}")).json()
    output = sub["output"]["text"]
    assert f"held: ['counts.csv=18', 'notes.md=14', 'paper.pdf={len(pdf)}']" in output
    for name in ("sources/notes.md", "sources/counts.csv", "sources/paper.pdf"):
        assert name in output
    async with echo_worker(server, server.services.settings, name="w2"):
        note = await client.post("/api/v1/workflows", json={"document": NOTE})
        assert note.status_code == 201, note.text
        reported = await client.post("/api/v1/tasks", json={
            "description": "Report on my files", "workflow": "note",
            "sources": [u["upload_id"] for u in uploads]})
        await wait_for_status(client, reported.json()["task_id"], "completed")
    report = (await client.get(f"/api/v1/tasks/{reported.json()['task_id']}/report")).text
    assert all(f"sources/{name}" in report for name in ("notes.md", "counts.csv", "paper.pdf"))
    listed = (await client.get("/api/v1/uploads")).json()["uploads"]
    assert len(listed) == 3
    in_use = await client.delete(f"/api/v1/uploads/{uploads[0]['upload_id']}")
    assert in_use.status_code == 409


async def test_a_word_document_and_a_workbook_upload_with_their_kinds(
    server: RunningServer, client: httpx.AsyncClient, tmp_path: Path,
) -> None:
    """A .docx and a .xlsx (built from this machine's licence text and package list) are
    sources of kinds docx and xlsx, with their text; the same .docx cut short is a 422 that
    leaves nothing behind."""
    write_docx(tmp_path / "licence.docx")
    write_xlsx(tmp_path / "packages.xlsx")
    document, book = ((tmp_path / n).read_bytes() for n in ("licence.docx", "packages.xlsx"))
    resp = await _upload(client, ("licence.docx", document), ("packages.xlsx", book))
    assert resp.status_code == 201, resp.text
    assert [(u["name"], u["kind"]) for u in resp.json()["uploads"]] == [
        ("licence.docx", "docx"), ("packages.xlsx", "xlsx")]
    assert all(u["text_chars"] > 1000 for u in resp.json()["uploads"])
    before = await _state(server)
    cut = await _upload(client, ("cut.docx", document[: len(document) // 2]))
    assert cut.status_code == 422, cut.text
    assert "Word document" in cut.json()["message"]
    await _nothing_left(server, before)


def _zip(members: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return out.getvalue()


@pytest.mark.parametrize(("files", "status", "words"), [
    ([("../escape.md", b"# x")], 422, "name"),
    ([("fake.pdf", b"just some text, not a PDF")], 422, "not a PDF"),
    ([("tool.exe", b"MZ\x90\x00" + bytes(200))], 415, ""),
    ([("bomb.zip", _zip({"zeros.txt": bytes(40 * 1024 * 1024)}))], 422, "archive bomb"),
    ([("big.txt", b"x" * (LIMIT + 1))], 413, "limit"),
    ([("a.md", b"# a"), ("a.md", b"# b")], 422, "named"),
    ([("ok.md", b"# fine"), ("bad.pdf", b"%PDF-1.4 broken")], 422, ""),
])
async def test_a_hostile_upload_is_refused_and_leaves_nothing(
    server: RunningServer, client: httpx.AsyncClient,
    files: list[tuple[str, bytes]], status: int, words: str,
) -> None:
    """Each refusal has its status and says why; no row and no stored file stays."""
    before = await _state(server)
    resp = await _upload(client, *files)
    assert resp.status_code == status, resp.text
    assert set(resp.json()) == {"error", "message", "details"}
    assert words in resp.json()["message"]
    await _nothing_left(server, before)


async def test_a_nul_in_a_file_name_is_refused(server: RunningServer,
                                               client: httpx.AsyncClient) -> None:
    """A multipart file name holding a NUL is 4xx, with nothing stored."""
    before = await _state(server)
    body = (b"--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a\x00b.md\"\r\n"
            b"Content-Type: text/markdown\r\n\r\n# hi\r\n--b--\r\n")
    resp = await client.post("/api/v1/uploads", content=body,
                             headers={"content-type": "multipart/form-data; boundary=b"})
    assert 400 <= resp.status_code < 500, resp.text
    await _nothing_left(server, before)


async def test_a_gigabyte_is_cut_at_the_limit(server: RunningServer,
                                              client: httpx.AsyncClient) -> None:
    """A client announcing 1 GB (with `Expect: 100-continue`, as curl does) is answered 413
    at once; one that streams past the limit is cut off with 413 too; nothing is kept."""
    before = await _state(server)
    host, port = server.url.removeprefix("http://").split(":")
    token = client.headers["Authorization"]
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(f"POST /api/v1/uploads HTTP/1.1\r\nHost: {host}\r\nAuthorization: {token}\r\n"
                 "Content-Type: multipart/form-data; boundary=b\r\nExpect: 100-continue\r\n"
                 f"Content-Length: {1024 ** 3}\r\n\r\n".encode())
    async with asyncio.timeout(10):
        head = await reader.readuntil(b"\r\n\r\n")
    writer.close()
    assert head.startswith(b"HTTP/1.1 413"), head

    async def chunks() -> AsyncIterator[bytes]:
        yield b"--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"x.txt\"\r\n\r\n"
        for _ in range(LIMIT // 16384 + 20):
            yield b"x" * 16384

    streamed = await client.post("/api/v1/uploads", content=chunks(), headers={
        "content-type": "multipart/form-data; boundary=b"})
    assert streamed.status_code == 413
    await _nothing_left(server, before)


async def test_a_users_uploads_have_a_quota_and_are_theirs(
    server: RunningServer, client: httpx.AsyncClient,
) -> None:
    """Past the user's quota: 413; another user cannot use (422) or delete (404) them."""
    chunk = b"y" * (LIMIT - 100)
    for i in range(4):
        assert (await _upload(client, (f"part{i}.txt", chunk))).status_code == 201
    over = await _upload(client, ("part4.txt", chunk))
    assert over.status_code == 413
    assert "you may keep" in over.json()["message"]
    mine = (await client.get("/api/v1/uploads")).json()["uploads"][0]["upload_id"]
    bob = await login(server, server.services.settings, "bob")
    try:
        refused = await bob.post("/api/v1/tasks", json={"description": "steal",
                                                        "sources": [mine]})
        assert refused.status_code == 422
        assert refused.json()["details"][0]["field"] == "sources.0"
        assert (await bob.delete(f"/api/v1/uploads/{mine}")).status_code == 404
    finally:
        await bob.aclose()
    assert (await client.delete(f"/api/v1/uploads/{mine}")).status_code == 204


class Indexer(EchoTool):
    """The echo tool, playing `shoal mcp sources`: it uses the index of `sources/notes.md`
    that it was handed in `.index/` (content-addressed), else builds one there."""

    async def run(self, run: ToolRun) -> ToolOutcome:
        outcome = await super().run(run)
        sha = hashlib.sha256((run.workspace / "sources" / "notes.md").read_bytes()).hexdigest()
        index = run.workspace / ".index" / f"{sha}.v1.sqlite"
        how = "adopted" if index.exists() else "built"
        if how == "built":
            index.parent.mkdir(exist_ok=True)
            index.write_bytes(b"an index of " + sha.encode())
        return ToolOutcome(status=outcome.status, output=f"{outcome.output}\nindex: {how}")


async def test_a_sources_index_made_on_one_worker_is_handed_to_the_next(
        server: RunningServer, client: httpx.AsyncClient) -> None:
    """The index a step built travels back as a cache of its task (never among the task's
    files a user downloads), and a later task of the user's over the same file gets it on
    another worker: nothing is built again."""
    uploaded = (await _upload(client, ("notes.md", b"# Notes\n\nCats."))).json()["uploads"]
    plan = [{"name": "read", "description": "read them", "tool": "echo"}]
    outputs: list[str] = []
    for worker in ("w1", "w2"):  # a fresh worker each time, with a data folder of its own
        async with echo_worker(server, server.services.settings, name=worker,
                               tools={"echo": Indexer()}):
            task = await client.post("/api/v1/tasks", json={
                "description": "Read my notes", "plan": plan,
                "sources": [u["upload_id"] for u in uploaded]})
            assert task.status_code == 201, task.text
            detail = await wait_for_status(client, task.json()["task_id"], "completed")
        sub = detail["subtasks"][0]["subtask_id"]
        outputs.append((await client.get(f"/api/v1/subtasks/{sub}")).json()["output"]["text"])
        files = (await client.get(f"/api/v1/subtasks/{sub}/files")).json()
        assert not any(".index/" in str(f) for f in files)  # a cache, not the work
    assert ["index: built" in outputs[0], "index: adopted" in outputs[1]] == [True, True]


async def test_a_workflow_that_reads_sources_refuses_a_task_without_any(
        server: RunningServer, client: httpx.AsyncClient) -> None:
    """`research` needs the user's files (`needs_sources`): without any, a 422 naming
    `sources` and saying how to give them; nothing is stored."""
    resp = await client.post("/api/v1/tasks", json={"workflow": "research",
                                                    "description": "What do my notes say?"})
    assert resp.status_code == 422, resp.text
    body = resp.json()
    assert body["details"][0]["field"] == "sources"
    assert "POST /api/v1/uploads" in body["message"] + str(body["details"])
    assert (await client.get("/api/v1/tasks")).json()["tasks"] == []
