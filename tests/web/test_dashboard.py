"""The dashboard in a real browser (Debian's chromium through Playwright) against a real control
plane on a port with a worker: sign in through the form, watch a task's graph go live to
completed with the right colours and a subtask's log lines arrive while it runs; another
user's task is "not found"; no console errors on any page."""

from __future__ import annotations

import asyncio
import re
import zipfile

from playwright.async_api import Page, expect

from shoal import admin
from shoal.api.server import running_server
from shoal.config import Settings
from shoal.demo.model import create_demo_model_app, recorded_requests, running_demo_model
from shoal.tools.agent_loop import OpenAICompatTool
from shoal.tools.base import ToolOutcome, ToolRun
from shoal.tools.echo import EchoTool
from shoal.tools.evaluator import EvaluatorTool
from tests.runtime.harness import echo_worker, login, sse_events, submit
from tests.runtime.test_flow import FailsFirst
from tests.web.browser import SCREENSHOTS, browser_page, sign_in

COMPLETED = "rgb(31, 157, 85)"  # --completed in app.css


class LoggedGate(EchoTool):
    """Echo, except that a run with option `gated` logs a line, streams some model text when
    told to `speak`, then waits for the gate."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.speak = asyncio.Event()

    async def run(self, run: ToolRun) -> ToolOutcome:
        if run.options.get("gated"):
            run.log("working on it: waiting for the gate")
            await self.speak.wait()
            assert run.stream is not None
            run.stream("Thinking aloud, ")
            run.stream("token by token.")
            await self.gate.wait()
        return await super().run(run)


async def test_a_task_runs_live_in_the_browser(settings: Settings) -> None:
    tool = LoggedGate()
    async with running_server(settings) as srv, \
            echo_worker(srv, settings, tools={"echo": tool}, slots=1):
        client = await login(srv, settings)
        try:
            task_id = await submit(client, [
                {"name": "Gated", "description": "held at the gate", "tool": "echo",
                 "options": {"gated": True}},
                {"name": "After", "description": "runs after it", "tool": "echo",
                 "dependencies": [0]}], description="Build the thing")
            async with browser_page("task-runs-live", srv.url) as watched:
                page = watched.page
                await sign_in(page, "alice")
                await page.get_by_role("link", name="Build the thing").click()
                await expect(page).to_have_url(re.compile(f"/tasks/{task_id}$"))
                graph = page.locator("#graph")
                await expect(graph.locator(".node")).to_have_count(2)
                gated = graph.locator(".node", has_text="Gated")
                after = graph.locator(".node", has_text="After")
                await expect(after).to_have_attribute("data-status", "pending")
                await gated.click()
                log = page.locator("#log")
                await expect(log).to_contain_text("waiting for the gate")  # while it runs
                await expect(gated).to_have_attribute("data-status", "in_progress")
                tool.speak.set()  # the page is live now: streamed text is not replayed
                await expect(page.locator("#stream")).to_have_text(
                    "Thinking aloud, token by token.")
                tool.gate.set()
                await expect(page.locator("#task-status")).to_have_text("completed")
                for node in (gated, after):
                    await expect(node).to_have_attribute("data-status", "completed")
                    await expect(node).to_have_class(re.compile(r"\bcritical\b"))  # a chain
                    assert await node.evaluate(
                        "n => getComputedStyle(n).borderTopColor") == COMPLETED
                await expect(log).to_contain_text("echo: ")
                await expect(page.locator("#task-facts")).to_contain_text("Cost $0.0000")
                await expect(page.locator("#task-facts")).to_contain_text("took")
                await expect(page.locator("#blackboard")).to_have_count(0)  # dag: the graph
                assert (await log.inner_text()).count("waiting for the gate") == 1
                await page.screenshot(path=str(SCREENSHOTS / "task-page.png"), full_page=True)
                await page.get_by_role("link", name="Tasks").click()
                row = page.locator(f"tr[data-task-id='{task_id}']")
                await expect(row.locator(".badge")).to_have_text("completed")
                watched.clean()
        finally:
            await client.aclose()


async def test_another_users_task_is_not_found(settings: Settings) -> None:
    async with running_server(settings) as srv, echo_worker(srv, settings):
        bob = await login(srv, settings, "bob")
        try:
            task_id = await submit(bob, [{"name": "Mine", "description": "d", "tool": "echo"}])
        finally:
            await bob.aclose()
        await admin.create_user(srv.services.db, settings, username="alice",
                                password="password123")
        async with browser_page("not-found", srv.url) as watched:
            page = watched.page
            await sign_in(page, "alice")
            await expect(page.get_by_text("No tasks yet")).to_be_visible()
            await page.goto(f"/tasks/{task_id}")
            await expect(page.get_by_role("heading", name="Not found")).to_be_visible()
            await page.goto("/tasks/not-a-task")
            await expect(page.get_by_role("heading", name="Not found")).to_be_visible()
            watched.errors = [e for e in watched.errors if "404" not in e]  # the API said so
            watched.clean()


async def test_a_page_without_a_session_asks_to_sign_in(settings: Settings) -> None:
    async with running_server(settings) as srv:
        await admin.create_user(srv.services.db, settings, username="alice",
                                password="password123")
        async with browser_page("sign-in", srv.url) as watched:
            page = watched.page
            await page.goto("/tasks/0b6e3c1e-8a47-4a39-9df4-0b7f2b0f8a11")
            await expect(page.get_by_role("heading", name="Sign in to Shoal")).to_be_visible()
            await page.get_by_label("Username").fill("alice")
            await page.get_by_label("Password").fill("wrong password")
            await page.get_by_role("button", name="Sign in").click()
            await expect(page.get_by_role("alert")).to_have_text("Wrong username or password.")
            watched.errors = [e for e in watched.errors if "401" not in e]  # the API said so
            await page.get_by_label("Password").fill("password123")
            await page.get_by_role("button", name="Sign in").click()
            await expect(page.get_by_text("Signed in as alice")).to_be_visible()
            await page.get_by_role("button", name="Sign out").click()
            await expect(page.get_by_role("heading", name="Sign in to Shoal")).to_be_visible()
            watched.clean()


async def test_checkpoints_are_decided_in_the_dialog(settings: Settings) -> None:
    """Reject one task's checkpoint, approve another's, correct a third's with apply-to-future:
    each task goes on as the API says it should."""
    app = create_demo_model_app()
    async with running_demo_model(app) as model, running_server(settings) as srv, \
            echo_worker(srv, settings, slots=2, tools={
                "openai_compat": OpenAICompatTool(base_url=model, api_key="sk-test",
                                                  model="shoal-demo"),
                "evaluator": EvaluatorTool()}):
        client = await login(srv, settings)
        try:
            ids = {}
            for name in ("reject", "approve", "correct"):
                resp = await client.post("/api/v1/tasks", json={
                    "description": f"Task to {name}", "checkpoint_frequency": "low",
                    "plan": [{"name": "calc", "tool": "openai_compat",
                              "description": "Write calc.py: add numbers [demo:score=3]"}]})
                assert resp.status_code == 201, resp.text
                ids[name] = resp.json()["task_id"]
            for task_id in ids.values():
                await sse_events(client, task_id, until={"checkpoint_ready"})
            async with browser_page("checkpoints", srv.url) as watched:
                page = watched.page
                await sign_in(page, "alice")
                dialog = page.get_by_role("dialog")
                status = page.locator("#task-status")
                badge = page.locator("#pending")  # on every page: the open checkpoints
                await expect(badge).to_have_text("3 checkpoints waiting")
                await expect(dialog).to_be_hidden()  # opened before: counted, not pushed
                await badge.click()
                await expect(dialog.get_by_role("heading")).to_have_text("Checkpoint: low score")
                await dialog.get_by_role("button", name="Decide later").click()
                await expect(dialog).to_be_hidden()

                await page.goto(f"/tasks/{ids['reject']}")
                await expect(dialog.get_by_role("heading")).to_have_text("Checkpoint: low score")
                await expect(dialog.locator("#checkpoint-task")).to_have_text("Task to reject")
                await dialog.get_by_label("Why (optional)").fill("Wrong approach.")
                await dialog.get_by_role("button", name="Reject").click()
                await expect(status).to_have_text("cancelled")
                await expect(dialog).to_be_hidden()

                await page.goto(f"/tasks/{ids['approve']}")
                await expect(dialog.get_by_role("heading")).to_have_text("Checkpoint: low score")
                await dialog.get_by_role("button", name="Approve").click()
                await expect(status).to_have_text("completed")

                await page.goto(f"/tasks/{ids['correct']}")
                await expect(dialog.get_by_role("heading")).to_have_text("Checkpoint: low score")
                corrected = await dialog.get_attribute("data-checkpoint-id")
                await dialog.get_by_role("button", name="Correct").click()  # no guidance yet
                await expect(dialog.locator("#cp-guidance-error")).to_contain_text("guidance")
                watched.errors = [e for e in watched.errors if "422" not in e]  # shown above
                await dialog.get_by_label("Type").select_option("bug")
                await dialog.get_by_label("Guidance").fill("Use Decimal for money amounts.")
                await dialog.get_by_label("calc.py").check()  # a reference file
                await dialog.get_by_label("Apply to my future subtasks").check()
                await dialog.get_by_role("button", name="Correct").click()
                await expect(badge).to_be_hidden()
                await page.get_by_role("link", name="Workers").click()
                # the corrected work is judged again (still 3): a new checkpoint opens, and
                # shows on the page that is open
                await expect(dialog).to_be_visible()
                await expect(dialog).not_to_have_attribute("data-checkpoint-id", corrected)
                await expect(badge).to_have_text("1 checkpoint waiting")
                await dialog.get_by_role("link", name="Task to correct").click()
                await expect(page).to_have_url(re.compile(f"/tasks/{ids['correct']}$"))
                await expect(dialog).to_be_visible()  # the task's own: shown on its page
                await dialog.get_by_role("button", name="Approve").click()
                await expect(status).to_have_text("completed")
                await expect(badge).to_be_hidden()
                await corrected_work_is_shown(page)
                watched.clean()
            decided = {c["decision"] for c in (await client.get("/api/v1/checkpoints", params={
                "task_id": ids["correct"]})).json()["checkpoints"]}
            assert decided == {"correct", "approve"}
            sent = [str(m.get("content")) for body in recorded_requests(app)
                    for m in body["messages"]]
            assert any("Use Decimal for money amounts." in text for text in sent)
            assert any("Reference: calc.py" in text for text in sent)
            for name, final in (("reject", "cancelled"), ("approve", "completed")):
                assert (await client.get(f"/api/v1/tasks/{ids[name]}")).json()["status"] == final
        finally:
            await client.aclose()


async def corrected_work_is_shown(page: Page) -> None:
    """The corrected subtask's drawer: five scores, two attempts' worth of files with the
    correction's change in the diff, and every file of the task as a zip."""
    await page.locator("#graph .node", has_text="calc").click()
    chart = page.locator("#evaluation .chart li")
    await expect(chart).to_have_count(5)
    await expect(page.locator("#evaluation")).to_contain_text("/ 10")
    await page.locator("ul.files").get_by_role("button", name="calc.py").click()
    code = page.locator("#file-code")
    await expect(code.locator(".hl-k").first).to_be_visible()  # highlighted as Python
    await expect(code).to_contain_text("Use Decimal for money amounts.")
    diff = page.locator("#file-diff")
    await expect(diff.locator(".hl-gi", has_text="Use Decimal")).not_to_have_count(0)
    async with page.expect_download() as started:
        await page.get_by_role("button", name="Download files (zip)").click()
    saved = await (await started.value).path()
    with zipfile.ZipFile(saved) as archive:
        assert any(name.endswith("calc.py") for name in archive.namelist()), archive.namelist()
    await page.screenshot(path=str(SCREENSHOTS / "corrected-file.png"), full_page=True)


class Held(EchoTool):
    """Echo that never finishes: the task stays running until it is cancelled."""

    async def run(self, run: ToolRun) -> ToolOutcome:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


async def test_a_task_is_submitted_from_the_form_then_cancelled(settings: Settings) -> None:
    async with running_server(settings) as srv, \
            echo_worker(srv, settings, tools={"echo": Held()}, slots=1):
        client = await login(srv, settings)
        try:
            async with browser_page("submit-and-cancel", srv.url) as watched:
                page = watched.page
                await sign_in(page, "alice")
                await page.get_by_role("link", name="New task").click()
                await page.get_by_label("What should be done?").fill("Compare two databases")
                await page.get_by_label("Workflow").select_option("pipeline")
                revisions = page.get_by_label("max_revisions")
                await expect(revisions).to_have_value("1")  # the declared default
                await revisions.fill("9")
                await page.get_by_role("button", name="Submit").click()
                error = page.locator(".error[data-for='parameters.max_revisions']")
                await expect(error).to_contain_text("at most 5")
                watched.errors = [e for e in watched.errors if "422" not in e]  # shown above
                await revisions.fill("2")
                await page.get_by_text("More options").click()
                await page.get_by_label("echo").check()  # the tools the worker offers
                await page.get_by_label("Run commands").select_option("ask")
                await page.get_by_label("At most (minutes; empty: forever)").fill("30")
                await page.get_by_role("button", name="Submit").click()
                await expect(page).to_have_url(re.compile(r"/tasks/[0-9a-f-]{36}$"))
                await expect(page.get_by_text("pipeline workflow")).to_be_visible()
                await expect(page.locator("#blackboard")).to_contain_text("Nothing written yet.")
                await expect(page.locator("#task-facts")).to_contain_text("running for")
                task_id = page.url.rsplit("/", 1)[1]
                page.once("dialog", lambda dialog: asyncio.ensure_future(dialog.accept()))
                await page.get_by_role("button", name="Cancel task").click()
                await expect(page.locator("#task-status")).to_have_text("cancelled")
                await expect(page.get_by_role("button", name="Cancel task")).to_be_hidden()
                watched.clean()
            detail = (await client.get(f"/api/v1/tasks/{task_id}")).json()
            assert (detail["workflow"], detail["status"]) == ("pipeline", "cancelled")
            assert detail["description"] == "Compare two databases"
            assert detail["tool_preferences"] == ["echo"]
        finally:
            await client.aclose()


async def test_a_tool_approval_request_is_answered_in_the_dialog(settings: Settings) -> None:
    """An agent asks to run a command the task's policy says to ask about: the dialog shows
    what it asked, and approving lets the command run."""
    async with running_demo_model() as model, running_server(settings) as srv, \
            echo_worker(srv, settings, tools={"openai_compat": OpenAICompatTool(
                base_url=model, api_key="sk-test", model="shoal-demo")}):
        client = await login(srv, settings)
        try:
            resp = await client.post("/api/v1/tasks", json={
                "description": "Tests that ask first", "quality": "off",
                "permissions": {"commands": "ask"},
                "plan": [{"name": "tests", "tool": "openai_compat",
                          "description": "Write test_calc.py: tests for calc.py."}]})
            assert resp.status_code == 201, resp.text
            task_id = resp.json()["task_id"]
            async with browser_page("approval-request", srv.url) as watched:
                page = watched.page
                await sign_in(page, "alice")
                await page.goto(f"/tasks/{task_id}")
                dialog = page.get_by_role("dialog")
                await expect(dialog.get_by_role("heading")).to_have_text(
                    "Checkpoint: approval request")
                await expect(dialog).to_contain_text("run_command")
                await dialog.get_by_role("button", name="Approve").click()
                await expect(page.locator("#task-status")).to_have_text("completed")
                watched.clean()
        finally:
            await client.aclose()


async def test_a_retried_subtask_shows_its_attempts(settings: Settings) -> None:
    async with running_server(settings) as srv, \
            echo_worker(srv, settings, tools={"echo": FailsFirst()}):
        client = await login(srv, settings)
        try:
            task_id = await submit(client, [{"name": "Flaky", "description": "once",
                                             "tool": "echo"}], description="Try again")
            async with browser_page("retried", srv.url) as watched:
                page = watched.page
                await sign_in(page, "alice")
                await page.goto(f"/tasks/{task_id}")
                await expect(page.locator("#task-status")).to_have_text("completed")
                node = page.locator("#graph .node", has_text="Flaky")
                await expect(node).to_contain_text("2 attempts")
                await node.click()
                attempts = page.locator("ol.attempts li")
                await expect(attempts).to_have_count(2)
                await expect(attempts.first).to_contain_text("A flaky failure, on purpose.")
                await expect(attempts.last.locator(".badge")).to_have_text("succeeded")
                watched.clean()
        finally:
            await client.aclose()
