"""The whole path a user takes, in one run in a real browser: sign in, submit a `dag` task from
the form, watch the demo model plan it and the graph reach completed with every node's colour
right (approving the checkpoints it opens on the way), open a subtask's file, and download the
task's zip."""

from __future__ import annotations

import re
import zipfile

from playwright.async_api import expect

from shoal.api.server import running_server
from shoal.config import Settings
from shoal.demo.model import running_demo_model
from shoal.tools.agent_loop import OpenAICompatTool
from shoal.tools.evaluator import EvaluatorTool
from tests.runtime.harness import echo_worker, login
from tests.web.browser import SCREENSHOTS, browser_page, sign_in

COMPLETED = "rgb(31, 157, 85)"  # --completed in app.css


async def test_submit_watch_open_a_file_and_download(settings: Settings) -> None:
    async with running_demo_model() as model, running_server(settings) as srv, \
            echo_worker(srv, settings, slots=2, tools={
                "openai_compat": OpenAICompatTool(base_url=model, api_key="sk-test",
                                                  model="shoal-demo"),
                "evaluator": EvaluatorTool()}):
        client = await login(srv, settings)
        await client.aclose()
        async with browser_page("full-flow", srv.url) as watched:
            page = watched.page
            await sign_in(page, "alice")
            await page.get_by_role("link", name="New task").click()
            await page.get_by_label("What should be done?").fill(
                "Build a CLI todo app in Python with tests")
            await expect(page.get_by_label("Workflow")).to_have_value("dag")
            await page.get_by_label("Checkpoints", exact=True).select_option("low")
            await page.get_by_role("button", name="Submit").click()
            await expect(page).to_have_url(re.compile(r"/tasks/[0-9a-f-]{36}$"))
            done = page.locator("#task-status[data-status=completed]")
            dialog = page.locator("dialog[open]")
            asked = []
            while True:  # approve each checkpoint the quality loop opens, until it completes
                await expect(done.or_(dialog).first).to_be_visible(timeout=90_000)
                if await done.is_visible():
                    break
                asked.append(await dialog.get_by_role("heading").inner_text())
                await dialog.get_by_role("button", name="Approve").click()
                await expect(dialog).to_have_count(0)
            assert len(asked) <= 3, asked  # checkpoints "low": only where a score asks
            nodes = page.locator("#graph .node")
            assert await nodes.count() >= 3  # the planner and the work it planned
            for i in range(await nodes.count()):
                node = nodes.nth(i)
                await expect(node).to_have_attribute("data-status", "completed")
                assert await node.evaluate("n => getComputedStyle(n).borderTopColor") == \
                    COMPLETED
            work = nodes.filter(has_text=re.compile(r"\.py|test", re.IGNORECASE)).first
            await work.click()
            await expect(page.locator("#evaluation .chart li")).to_have_count(5)  # its scores
            await expect(page.locator("#quality-steps")).to_contain_text("Evaluate")
            files = page.locator("ul.files button")
            await expect(files).not_to_have_count(0)
            name = await files.first.inner_text()
            await files.first.click()
            await expect(page.locator("#file-code")).not_to_be_empty()
            async with page.expect_download() as started:
                await page.get_by_role("button", name="Download files (zip)").click()
            saved = await (await started.value).path()
            with zipfile.ZipFile(saved) as archive:
                assert any(n.endswith(name) for n in archive.namelist()), archive.namelist()
            await page.screenshot(path=str(SCREENSHOTS / "full-flow-task.png"), full_page=True)
            watched.clean()
