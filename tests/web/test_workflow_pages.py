"""A non-`dag` workflow's task page in a real browser: the supervisor (seed 001) on the demo
model and a real worker shows each route decision, with the router overruled first, and the
task's blackboard; the critical path runs through the steps that ran one after another; a
workflow's `human` step asks its question in the dialog, and the answer goes on the board."""

from __future__ import annotations

import re

from playwright.async_api import expect

from shoal.api.server import running_server
from shoal.config import Settings
from shoal.demo.corpus import SAMPLE_QUESTION, corpus_files
from tests.runtime.harness import demo_plane, echo_worker, login, sse_events
from tests.web.browser import browser_page, sign_in


async def test_the_supervisors_route_decisions_and_blackboard_show(settings: Settings) -> None:
    async with demo_plane(settings) as (srv, client):
        resp = await client.post("/api/v1/tasks", json={
            "description": "Find an Indian restaurant near Taipei 101 and reserve a table "
                           "for tomorrow at 7 PM", "workflow": "supervisor"})
        assert resp.status_code == 201, resp.text
        task_id = resp.json()["task_id"]
        async with browser_page("supervisor", srv.url) as watched:
            page = watched.page
            await sign_in(page, "alice")
            await page.goto(f"/tasks/{task_id}")
            await sse_events(client, task_id, until={"task_complete", "task_failed"})
            await expect(page.locator("#task-status")).to_have_text("completed")
            await expect(page.locator("#task-facts")).to_contain_text("took")
            decisions = page.locator("#route-decisions li")
            await expect(decisions).to_have_count(4)
            await expect(decisions.nth(0)).to_contain_text(
                "googlemap chosen by the fallback (the router named telephone)")
            await expect(decisions.nth(1)).to_contain_text("calendar chosen by the router")
            await expect(decisions.nth(3)).to_contain_text("summarize chosen by the engine")
            board = page.locator("#blackboard")
            await expect(board.locator("[data-entry]")).not_to_have_count(0)
            await expect(board).to_contain_text("Saffron 46")
            critical = page.locator("#graph .node.critical")
            await expect(critical).not_to_have_count(0)
            await expect(page.locator("#graph .node", has_text="summarize")).to_have_class(
                re.compile(r"\bcritical\b"))  # the last step is on it
            watched.clean()


async def test_a_reports_citation_opens_its_passage_with_the_quote_marked(
    settings: Settings,
) -> None:
    """Research over the sample corpus: below the report, what each citation cites, as Shoal's
    check found it; a marker in the report opens its passage, the quote highlighted, and a data
    citation shows its SQL and rows."""
    async with demo_plane(settings) as (srv, client):
        files = [("file", (p.name, p.read_bytes())) for p in corpus_files()]
        uploaded = await client.post("/api/v1/uploads", files=files)
        assert uploaded.status_code == 201, uploaded.text
        resp = await client.post("/api/v1/tasks", json={
            "description": SAMPLE_QUESTION, "workflow": "research",
            "sources": [u["upload_id"] for u in uploaded.json()["uploads"]]})
        assert resp.status_code == 201, resp.text
        task_id = resp.json()["task_id"]
        # A whole research run (about 12 s alone here): a bound on a hang, not a timing.
        await sse_events(client, task_id, until={"task_complete", "task_failed"}, within=120)
        async with browser_page("citations", srv.url) as watched:
            page = watched.page
            await sign_in(page, "alice")
            await page.goto(f"/tasks/{task_id}")
            await expect(page.locator("#task-status")).to_have_text("completed")
            cites = page.locator("#citations")
            await expect(cites).to_be_visible()
            quoted = cites.locator("li", has=page.locator("mark")).first
            number = (await quoted.get_attribute("id") or "").removeprefix("cite-")
            frame = page.frame_locator("#report-frame")
            await frame.locator(f"a[data-cite='{number}']").first.click()
            await expect(quoted.locator("details")).to_have_attribute("open", "")
            await expect(quoted).to_be_focused()
            await expect(quoted.locator("mark")).not_to_be_empty()
            await expect(cites.locator("li", has=page.locator("pre code", has_text="SELECT"))
                         .locator("table.rows tbody tr")).not_to_have_count(0)
            watched.clean()


ASK_FIRST = """\
name: ask_first
version: 1
description: Ask who it is for, then write for them.
roles:
  writer: {prompt: "Write on {query} for {audience}", tools: [echo]}
steps:
  - {id: audience, kind: human, question: "Who is the note on {query} for?"}
  - {id: write, kind: agent, role: writer, after: [audience]}
"""


async def test_a_workflows_question_is_answered_in_the_dialog(settings: Settings) -> None:
    async with running_server(settings) as srv, echo_worker(srv, settings):
        client = await login(srv, settings)
        try:
            added = await client.post("/api/v1/workflows", json={"document": ASK_FIRST})
            assert added.status_code == 201, added.text
            resp = await client.post("/api/v1/tasks", json={
                "description": "onboarding", "workflow": "ask_first"})
            assert resp.status_code == 201, resp.text
            task_id = resp.json()["task_id"]
            async with browser_page("question", srv.url) as watched:
                page = watched.page
                await sign_in(page, "alice")
                await page.goto(f"/tasks/{task_id}")
                dialog = page.get_by_role("dialog")
                await expect(dialog.get_by_role("heading")).to_have_text("Checkpoint: question")
                await expect(dialog.locator("#cp-question")).to_have_text(
                    "Who is the note on onboarding for?")
                await dialog.get_by_label("Your answer").fill("new hires")
                await dialog.get_by_role("button", name="Answer").click()
                await expect(page.locator("#task-status")).to_have_text("completed")
                await expect(page.locator("#blackboard [data-entry=audience]")).to_contain_text(
                    "new hires")
                await expect(page.locator("#blackboard [data-entry=write]")).to_contain_text(
                    "Write on onboarding for new hires")
                watched.clean()
        finally:
            await client.aclose()
