"""A task's report over HTTP: Markdown or a sanitised page by `Accept`, a PDF whose text holds
its headings, and share links that open it without signing in until they are revoked or the
task is deleted."""

from __future__ import annotations

import io
import uuid

import httpx
import pypdf
import pytest
from bs4 import BeautifulSoup

from shoal.api.server import RunningServer
from shoal.worker.agent import Worker
from tests.runtime.harness import login, wait_for_status

NOTE = """\
name: note
version: 1
description: One note, which is the report.
roles:
  writer:
    prompt: |
      # Findings on {query}

      | city | cats |
      |------|------|
      | Oslo | 12   |

      <script>alert(1)</script><img src=x onerror="alert(1)">

      ## Details

      Plain words.
    tools: [echo]
steps:
  - {id: write, kind: agent, role: writer, writes: report}
result: report
result_file: report.md
"""


@pytest.fixture
async def reported(client: httpx.AsyncClient, worker: Worker) -> str:
    """A completed task of the `note` workflow: it has a report."""
    added = await client.post("/api/v1/workflows", json={"document": NOTE})
    assert added.status_code == 201, added.text
    resp = await client.post("/api/v1/tasks", json={"description": "Cats of Oslo",
                                                    "workflow": "note"})
    assert resp.status_code == 201, resp.text
    task_id = str(resp.json()["task_id"])
    await wait_for_status(client, task_id, "completed")
    return task_id


async def test_the_report_is_markdown_or_a_page_without_script(
    client: httpx.AsyncClient, reported: str,
) -> None:
    """Markdown by default; HTML when `Accept` prefers it, with no script, no handler, and a
    policy that would stop one anyway."""
    md = await client.get(f"/api/v1/tasks/{reported}/report")
    assert md.status_code == 200, md.text
    assert md.headers["content-type"].startswith("text/markdown")
    assert "# Findings on Cats of Oslo" in md.text
    page = await client.get(f"/api/v1/tasks/{reported}/report",
                            headers={"Accept": "text/html,*/*;q=0.8"})
    assert page.headers["content-type"].startswith("text/html")
    assert "default-src 'none'" in page.headers["content-security-policy"]
    soup = BeautifulSoup(page.text, "html.parser")
    assert [h.get_text() for h in soup.find_all("h2")] == ["Details"]
    assert soup.find("table") is not None
    assert soup.find("script") is None
    assert not [a for tag in soup.find_all(True) for a in tag.attrs if a.startswith("on")]


async def test_the_pdf_holds_the_headings(client: httpx.AsyncClient, reported: str) -> None:
    """A valid PDF whose text has the report's headings and the task on its title page."""
    resp = await client.get(f"/api/v1/tasks/{reported}/report.pdf")
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"] == "application/pdf"
    text = "\n".join(p.extract_text() for p in pypdf.PdfReader(io.BytesIO(resp.content)).pages)
    for words in ("Cats of Oslo", "Findings on Cats of Oslo", "Details", reported):
        assert words in text


async def test_a_task_without_a_report_says_so(client: httpx.AsyncClient,
                                               worker: Worker) -> None:
    """404 `no_report` for a task whose workflow writes none; 409 for a share of it."""
    resp = await client.post("/api/v1/tasks", json={"description": "Echo", "plan": [
        {"name": "a", "description": "echo", "tool": "echo"}]})
    task_id = resp.json()["task_id"]
    await wait_for_status(client, task_id, "completed")
    missing = await client.get(f"/api/v1/tasks/{task_id}/report")
    assert (missing.status_code, missing.json()["error"]) == (404, "no_report")
    assert (await client.post(f"/api/v1/tasks/{task_id}/shares")).status_code == 409


async def test_a_share_link_opens_the_report_until_revoked(
    server: RunningServer, client: httpx.AsyncClient, reported: str,
) -> None:
    """Anyone with the link reads the report (and nothing else of the task), never cached;
    the token is shown once; revoked, the link is 404 at once."""
    made = await client.post(f"/api/v1/tasks/{reported}/shares")
    assert made.status_code == 201, made.text
    url = made.json()["url"]
    token = url.rsplit("/", 1)[1]
    assert token.startswith("shs_")
    assert len(token) > 40
    async with httpx.AsyncClient(base_url=server.url) as anyone:
        page = await anyone.get(f"/s/{token}")
        assert page.status_code == 200, page.text
        assert page.headers["cache-control"] == "no-store"
        assert "Findings on Cats of Oslo" in page.text
        assert reported not in page.text
        assert "The note workflow" not in page.text
        pdf = await anyone.get(f"/s/{token}/report.pdf")
        assert pdf.headers["content-type"] == "application/pdf"
        listed = (await client.get(f"/api/v1/tasks/{reported}/shares")).json()["shares"]
        assert [s["url"] for s in listed] == [None]
        assert listed[0]["last_used_at"] is not None
        share_id = made.json()["share_id"]
        assert (await client.delete(
            f"/api/v1/tasks/{reported}/shares/{share_id}")).status_code == 204
        gone = await anyone.get(f"/s/{token}")
        assert gone.status_code == 404
        assert gone.headers["cache-control"] == "no-store"
        assert (await anyone.get(f"/s/shs_{uuid.uuid4().hex}")).status_code == 404


async def test_a_deleted_task_takes_its_links_along(
    server: RunningServer, client: httpx.AsyncClient, reported: str,
) -> None:
    """After the task is deleted its link opens nothing; another user can share nothing of
    it."""
    token = (await client.post(f"/api/v1/tasks/{reported}/shares")).json()["url"].rsplit("/")[-1]
    bob = await login(server, server.services.settings, "bob")
    try:
        assert (await bob.post(f"/api/v1/tasks/{reported}/shares")).status_code == 404
        assert (await bob.get(f"/api/v1/tasks/{reported}/report")).status_code == 404
    finally:
        await bob.aclose()
    assert (await client.delete(f"/api/v1/tasks/{reported}")).status_code == 204
    async with httpx.AsyncClient(base_url=server.url) as anyone:
        assert (await anyone.get(f"/s/{token}")).status_code == 404
