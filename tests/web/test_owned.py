"""What a user owns, in a real browser against a real control plane and echo worker: files
attached and a budget given on the submit form show on the task's page; a report is shown in a
sandboxed frame, downloaded as a PDF, shared by a link that opens without signing in until it
is revoked, and its task deleted; webhooks and an email address are set on the settings page;
a workflow document is refused with its line, then added, on the workflows page; the submit
form's optional-step switch and inserted agent reach the API, and a queued task says so."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from playwright.async_api import FilePayload, Page, expect

from shoal.api.server import running_server
from shoal.config import Settings
from tests.conftest import make_settings
from tests.runtime.harness import GatedEcho, echo_worker, login, sse_events, submit, task_detail
from tests.web.browser import SCREENSHOTS, browser_page, sign_in
from tests.web.test_accessibility import named_and_fitting

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

DRAFTED = """\
name: drafted
version: 1
description: A draft, a polish one may skip, then the note.
roles:
  drafter: {prompt: "Draft a note on {query}", tools: [echo]}
  polisher: {prompt: "Polish the draft on {query}", tools: [echo]}
  writer: {prompt: "Write the note on {query}", tools: [echo]}
steps:
  - {id: draft, kind: agent, role: drafter, allows_insert: true}
  - {id: polish, kind: agent, role: polisher, after: [draft], optional: true}
  - {id: write, kind: agent, role: writer, after: [polish]}
"""

BROKEN = NOTE.replace("kind: agent", "kind: agnet")  # line 7


async def form_screenshot(page: Page, part: str, name: str) -> None:
    """A screenshot of the viewport with `part` in it. Not of the whole page: after one of
    those, a click further down the page can land where the element was before."""
    await page.locator(part).scroll_into_view_if_needed()
    await page.screenshot(path=str(SCREENSHOTS / f"{name}.png"))


async def both_themes(page: Page, name: str) -> None:
    """Screenshots of the whole page, in the light theme and in the dark one (the dark one
    stays). A test that clicks on afterwards reloads the page first (see `form_screenshot`)."""
    await page.screenshot(path=str(SCREENSHOTS / f"{name}-light.png"), full_page=True)
    await page.get_by_role("button", name=re.compile("theme")).click()
    await expect(page.locator("html")).to_have_attribute("data-theme", "dark")
    await page.screenshot(path=str(SCREENSHOTS / f"{name}-dark.png"), full_page=True)


def payload(name: str, mime: str, data: bytes) -> FilePayload:
    """A file for a file input, made in memory."""
    return {"name": name, "mimeType": mime, "buffer": data}


def refusals_only(errors: list[str], *statuses: int) -> list[str]:
    """The console's errors but the browser's note of the API answering one of `statuses`."""
    return [e for e in errors
            if not any(f"status of {s}" in e for s in statuses)]


async def test_attached_files_and_a_budget_show_on_the_task_page(settings: Settings) -> None:
    """Files attached on the form are the task's sources, and its budget's use is drawn; a
    submission refused after its files were uploaded leaves no upload behind."""
    async with running_server(settings) as srv, echo_worker(srv, settings):
        client = await login(srv, settings)
        try:
            assert (await client.post("/api/v1/workflows", json={"document": NOTE})) \
                .status_code == 201
            async with browser_page("owned-sources", srv.url) as watched:
                page = watched.page
                await sign_in(page, "alice")
                await page.get_by_role("link", name="New task").click()
                await page.get_by_label("What should be done?").fill("Sum up the notes")
                await page.get_by_label("Workflow").select_option("note")
                files = page.get_by_label("Attach files")
                await files.set_input_files([payload("tool.bin", "application/octet-stream",
                                                     b"\x7fELF\x02\x01\x01\x00" * 64)])
                await page.get_by_role("button", name="Submit").click()
                refusal = page.locator(".error[data-for=sources]")
                await expect(refusal).to_contain_text("Shoal cannot read")  # 415
                await expect(page).to_have_url(re.compile("/new$"))
                await files.set_input_files([
                    payload("notes.md", "text/markdown", b"# Notes\n\nThe tide turns at six.\n"),
                    payload("depths.csv", "text/csv", b"place,depth\nbay,4\nreef,12\n")])
                await expect(page.locator("#sources-chosen li")).to_have_count(2)
                await expect(refusal).to_be_empty()
                await page.get_by_label("Tokens").fill("0")  # uploaded, then refused: 422
                await page.get_by_role("button", name="Submit").click()
                await expect(page.locator(".error[data-for='budget.tokens']")).not_to_be_empty()
                await expect(page.locator("#sources-chosen li").first).to_contain_text(
                    "markdown")  # they were uploaded
                await expect(page.get_by_role("button", name="Submit")).to_be_enabled()
                assert (await client.get("/api/v1/uploads")).json()["uploads"] == []
                await page.get_by_label("Tokens").fill("5000")
                await page.get_by_label("Dollars").fill("2")
                await page.get_by_label("Minutes", exact=True).fill("10")
                await form_screenshot(page, "#budget", "owned-submit-form")
                await page.get_by_role("button", name="Submit").click()
                await expect(page).to_have_url(re.compile(r"/tasks/[0-9a-f-]{36}$"))
                task_id = page.url.rsplit("/", 1)[1]
                sources = page.locator("#sources li")
                await expect(sources).to_have_count(2)
                await expect(sources.filter(has_text="notes.md")).to_contain_text("markdown")
                await expect(sources.filter(has_text="depths.csv")).to_contain_text("csv")
                budget = page.locator("#budget-use")
                await expect(budget.locator("li")).to_have_count(3)
                await expect(budget.locator("[data-limit=tokens]")).to_contain_text("of 5,000")
                await expect(budget.locator("[data-limit=cost_usd]")).to_contain_text("of $2.00")
                await expect(budget.locator("[data-limit=seconds]")).to_contain_text(
                    "of 10 min 0 s")
                await expect(budget.get_by_role("progressbar", name="Tokens used")) \
                    .to_have_attribute("aria-valuenow", re.compile(r"^\d+$"))
                await expect(page.locator("#task-status")).to_have_text("completed")
                await expect(page.frame_locator("#report-frame").locator(".report-body")) \
                    .to_contain_text("sources/notes.md")  # written while the page watched
                await named_and_fitting(page)
                detail = await task_detail(client, task_id)
                assert detail["budget"] == {"tokens": 5000, "cost_usd": 2.0, "seconds": 600.0}
                assert sorted(s["name"] for s in detail["sources"]) == ["depths.csv", "notes.md"]
                await both_themes(page, "owned-task")
                watched.errors = refusals_only(watched.errors, 415, 422)
                watched.clean()
        finally:
            await client.aclose()


async def test_a_report_is_shown_downloaded_shared_revoked_and_its_task_deleted(
        settings: Settings) -> None:
    """The report's page, its PDF, a share link opened signed out then revoked, and delete."""
    async with running_server(settings) as srv, echo_worker(srv, settings):
        client = await login(srv, settings)
        try:
            assert (await client.post("/api/v1/workflows", json={"document": NOTE})) \
                .status_code == 201
            resp = await client.post("/api/v1/tasks", json={"description": "the tides",
                                                            "workflow": "note"})
            assert resp.status_code == 201, resp.text
            task_id = resp.json()["task_id"]
            await sse_events(client, task_id, until={"task_complete", "task_failed"})
            async with browser_page("owned-report", srv.url) as watched:
                page = watched.page
                await sign_in(page, "alice")
                await page.goto(f"/tasks/{task_id}")
                report = page.locator("#report")
                await expect(report).to_be_visible()
                frame = page.frame_locator("#report-frame")
                await expect(frame.locator(".report-body")).to_contain_text("A note on the tides")
                assert await page.locator("#report-frame").get_attribute("sandbox") == \
                    "allow-same-origin allow-popups allow-popups-to-escape-sandbox"
                async with page.expect_download() as started:
                    await report.get_by_role("button", name="Download PDF").click()
                pdf = Path(await (await started.value).path())
                assert (await asyncio.to_thread(pdf.read_bytes)).startswith(b"%PDF")
                await expect(report.get_by_role("button", name="Download PDF")).to_be_enabled()

                await report.get_by_role("button", name="Create a share link").click()
                url = await page.locator("#share-url").input_value()
                await page.get_by_role("button", name="Copy").click()
                await expect(page.locator("#new-share")).to_contain_text(
                    re.compile(r"Copied\.|Ctrl\+C"))  # or the link is selected to copy
                await named_and_fitting(page)
                await both_themes(page, "owned-report")
                assert re.fullmatch(rf"{re.escape(srv.url)}/s/\S+", url), url
                await expect(page.locator("#shares tbody tr")).to_have_count(1)
                browser = page.context.browser
                assert browser is not None
                stranger = await browser.new_context()  # not signed in
                try:
                    shared = await stranger.new_page()
                    opened = await shared.goto(url)
                    assert opened is not None
                    assert opened.status == 200
                    await expect(shared.locator("body")).to_contain_text("A note on the tides")
                    await page.reload()
                    await expect(page.locator("#shares tbody tr td").nth(1)).not_to_have_text(
                        "never")  # it was opened
                    page.once("dialog", lambda dialog: dialog.accept())
                    await page.locator("#shares").get_by_role("button", name=re.compile(
                        "^Revoke")).click()
                    await expect(page.locator("#shares tbody tr")).to_have_count(0)
                    gone = await shared.goto(url)
                    assert gone is not None
                    assert gone.status == 404
                finally:
                    await stranger.close()

                page.once("dialog", lambda dialog: dialog.accept())
                await page.get_by_role("button", name="Delete task").click()
                await expect(page).to_have_url(re.compile(r"/$"))
                await expect(page.get_by_role("link", name="the tides")).to_have_count(0)
                assert (await client.get(f"/api/v1/tasks/{task_id}")).status_code == 404
                watched.clean()
        finally:
            await client.aclose()


async def test_a_running_task_is_not_deleted(settings: Settings) -> None:
    """Deleting a task that runs says why not (409), and the task stays."""
    tool = GatedEcho()
    async with running_server(settings) as srv, \
            echo_worker(srv, settings, tools={"echo": tool}):
        client = await login(srv, settings)
        try:
            task_id = await submit(client, [{"name": "Held", "description": "d",
                                             "tool": "echo", "options": {"gated": True}}],
                                   description="Held at the gate")
            async with browser_page("owned-delete-running", srv.url) as watched:
                page = watched.page
                await sign_in(page, "alice")
                await page.goto(f"/tasks/{task_id}")
                await expect(page.locator("#graph .node")).to_have_attribute(
                    "data-status", "in_progress")
                page.once("dialog", lambda dialog: dialog.accept())
                await page.get_by_role("button", name="Delete task").click()
                await expect(page.locator("#delete-error")).to_contain_text("cancel")
                await expect(page).to_have_url(re.compile(f"/tasks/{task_id}$"))
                tool.gate.set()
                await expect(page.locator("#task-status")).to_have_text("completed")
                watched.errors = refusals_only(watched.errors, 409)
                watched.clean()
        finally:
            await client.aclose()


async def test_the_settings_page_adds_a_webhook_and_an_email_address(tmp_path: Path) -> None:
    """A webhook added, pinged and switched off; an email address saved; an upload deleted."""
    settings = make_settings(tmp_path, smtp_host="127.0.0.1", smtp_port=2525, smtp_tls="none")
    async with running_server(settings) as srv:
        client = await login(srv, settings)
        try:
            sent = await client.post("/api/v1/uploads", files=[
                ("file", ("old-notes.md", b"# Old notes\n"))])
            assert sent.status_code == 201, sent.text
            async with browser_page("owned-settings", srv.url) as watched:
                page = watched.page
                await sign_in(page, "alice")
                await page.get_by_role("link", name="Settings").click()
                await expect(page).to_have_url(re.compile("/settings$"))
                await page.get_by_label("URL").fill("http://127.0.0.1:9/x")
                await page.get_by_label("Secret").fill("too short")
                await page.get_by_role("button", name="Add webhook").click()
                await expect(page.locator("#webhook-form .error[data-for=secret]")) \
                    .to_contain_text("16")
                await page.get_by_label("Secret").fill("0123456789abcdef-secret")
                await page.locator("#webhook-form").get_by_label(
                    "A checkpoint waits for me").uncheck()
                await page.get_by_role("button", name="Add webhook").click()
                row = page.locator("#webhooks tbody tr[data-webhook-id]")
                await expect(row).to_have_count(1)
                await expect(row).to_contain_text("http://127.0.0.1:9/x")
                await expect(row).not_to_contain_text("checkpoint.waiting")
                await row.get_by_role("button", name=re.compile("^Ping")).click()
                await expect(page.locator("#webhook-said")).to_contain_text("ping is on its way")
                await expect(page.locator("#deliveries tbody tr[data-delivery-id]")) \
                    .to_contain_text("ping")
                await row.get_by_role("switch").click()  # off
                await expect(row.get_by_role("switch")).not_to_be_checked()
                await expect(row.get_by_role("button", name=re.compile("^Ping"))).to_be_disabled()
                [hook] = (await client.get("/api/v1/notifications/webhooks")).json()["webhooks"]
                assert hook["enabled"] is False
                assert hook["events"] == ["task.completed", "task.failed",
                                          "task.budget_exceeded"]

                await page.get_by_label("Address").fill("ada@example.com")
                await page.locator("#email-form").get_by_role("button", name="Save").click()
                await expect(page.locator("#email-form")).to_contain_text("Saved.")
                email = (await client.get("/api/v1/notifications/email")).json()
                assert email["address"] == "ada@example.com"

                upload = page.locator("#uploads tbody tr[data-upload-id]")
                await expect(upload).to_contain_text("old-notes.md")
                await named_and_fitting(page)
                await both_themes(page, "owned-settings")
                await page.reload()
                page.once("dialog", lambda dialog: dialog.accept())
                await upload.get_by_role("button", name="Delete old-notes.md").click()
                await expect(upload).to_have_count(0)
                assert (await client.get("/api/v1/uploads")).json()["uploads"] == []
                watched.errors = refusals_only(watched.errors, 422)
                watched.clean()
        finally:
            await client.aclose()


async def test_the_workflows_page_shows_a_documents_line_and_adds_it(
        settings: Settings) -> None:
    """A broken document's error names its line; a good one is added, edited, removed."""
    async with running_server(settings) as srv:
        client = await login(srv, settings)
        await client.aclose()
        async with browser_page("owned-workflows", srv.url) as watched:
            page = watched.page
            await sign_in(page, "alice")
            await page.get_by_role("link", name="Workflows").click()
            await expect(page).to_have_url(re.compile("/workflows$"))
            await page.locator("#workflows").get_by_role("button", name="supervisor").click()
            await expect(page.locator("#workflow-document")).to_contain_text("steps:")
            text = page.get_by_label("Workflow document (YAML or JSON)")
            await text.fill(BROKEN)
            await page.get_by_role("button", name="Add workflow").click()
            error = page.locator("#workflow-error")
            await expect(error).to_contain_text("Line 7: steps.0.kind")
            await expect(text).to_have_attribute("aria-invalid", "true")
            await expect(text).to_be_focused()
            assert await text.evaluate("t => t.value.slice(t.selectionStart, t.selectionEnd)") \
                == "  - {id: write, kind: agnet, role: writer, writes: report}"
            await form_screenshot(page, "#workflow-error", "owned-workflows-error")
            await text.fill(NOTE)
            await page.get_by_role("button", name="Add workflow").click()
            await expect(page.locator("#workflow-said")).to_have_text("Added note, version 1.")
            await expect(error).to_be_empty()
            row = page.locator("#workflows tr[data-workflow=note]")
            await expect(row).to_contain_text("yours")
            await named_and_fitting(page)
            await expect(page.locator("#workflow-document")).to_contain_text(
                'prompt: "# A note on {query}"')
            await page.get_by_role("button", name="Edit as a new version").click()
            await expect(text).to_have_value(re.compile(r"^version: 2$", re.MULTILINE))
            await page.get_by_role("button", name="Add workflow").click()  # the YAML reads back
            await expect(page.locator("#workflow-said")).to_have_text("Added note, version 2.")
            await expect(row.locator("td").nth(1)).to_have_text("2")
            await both_themes(page, "owned-workflows")
            await page.reload()
            page.once("dialog", lambda dialog: dialog.accept())
            await row.get_by_role("button", name="Remove note").click()
            await expect(row).to_have_count(0)
            watched.errors = refusals_only(watched.errors, 422)
            watched.clean()


async def test_a_skipped_step_and_an_inserted_agent_reach_the_api(settings: Settings) -> None:
    """A step switched off on the form is skipped, and the agent added there runs."""
    async with running_server(settings) as srv, echo_worker(srv, settings):
        client = await login(srv, settings)
        try:
            assert (await client.post("/api/v1/workflows", json={"document": DRAFTED})) \
                .status_code == 201
            async with browser_page("owned-steps", srv.url) as watched:
                page = watched.page
                await sign_in(page, "alice")
                await page.get_by_role("link", name="New task").click()
                await page.get_by_label("What should be done?").fill("the harbour")
                await page.get_by_label("Workflow").select_option("drafted")
                polish = page.get_by_role("switch", name="polish")
                await expect(polish).to_be_checked()
                await polish.press("Space")  # the keyboard switches it off
                await expect(polish).not_to_be_checked()
                await page.get_by_text("Add my own agent").click()
                await page.get_by_label("After step").select_option("draft")
                await page.get_by_label("Its id").fill("fact_check")
                await page.get_by_label("Its prompt").fill("Check the facts of the draft")
                await expect(page.get_by_label("Its tool")).to_have_value("echo")  # draft's
                await named_and_fitting(page)
                await form_screenshot(page, "#insert", "owned-steps-form")
                await page.get_by_role("button", name="Submit").click()
                await expect(page).to_have_url(re.compile(r"/tasks/[0-9a-f-]{36}$"))
                task_id = page.url.rsplit("/", 1)[1]
                await expect(page.locator("#task-status")).to_have_text("completed")
                await expect(page.locator("#graph .node", has_text="fact_check")) \
                    .to_have_attribute("data-status", "completed")
                names = {s["name"] for s in (await task_detail(client, task_id))["subtasks"]}
                assert names == {"draft", "fact_check", "write"}, names  # no polish
                watched.clean()
        finally:
            await client.aclose()


async def test_a_queued_task_says_its_place(tmp_path: Path) -> None:
    """A submission past the user's running limit says it is queued, and where, until it
    starts."""
    settings = make_settings(tmp_path, max_active_tasks=1)
    tool = GatedEcho()
    async with running_server(settings) as srv, \
            echo_worker(srv, settings, tools={"echo": tool}):
        client = await login(srv, settings)
        try:
            assert (await client.post("/api/v1/workflows", json={"document": NOTE})) \
                .status_code == 201
            await submit(client, [{"name": "Held", "description": "d", "tool": "echo",
                                   "options": {"gated": True}}], description="Ahead in line")
            async with browser_page("owned-queued", srv.url) as watched:
                page = watched.page
                await sign_in(page, "alice")
                await page.get_by_role("link", name="New task").click()
                await page.get_by_label("What should be done?").fill("the harbour")
                await page.get_by_label("Workflow").select_option("note")
                await page.get_by_role("button", name="Submit").click()
                notice = page.locator("#submitted")
                await expect(notice).to_contain_text("Queued: position 1 in your queue")
                await expect(page.get_by_label("What should be done?")).to_be_empty()
                await form_screenshot(page, "#submitted", "owned-queued-form")
                await notice.get_by_role("link", name="Open the queued task").click()
                await expect(page.locator("#queue-position")).to_contain_text("position 1")
                tool.gate.set()  # the task ahead ends: this one starts
                await expect(page.locator("#task-status")).to_have_text("completed")
                await expect(page.locator("#queue-position")).to_be_hidden()
                watched.clean()
        finally:
            await client.aclose()
