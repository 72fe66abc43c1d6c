"""The task list in a real browser: pages of 25, a search, status and workflow filters kept in
the address, and cancelling a task from the list after a confirmation."""

from __future__ import annotations

import asyncio
import re

from playwright.async_api import expect

from shoal.api.server import running_server
from shoal.config import Settings
from tests.runtime.harness import echo_worker, login
from tests.web.browser import browser_page, sign_in
from tests.web.test_dashboard import Held

DASH = "\u2013"  # the pager's "1-25 of 30"


async def test_the_list_pages_searches_filters_and_cancels(settings: Settings) -> None:
    async with running_server(settings) as srv, \
            echo_worker(srv, settings, tools={"echo": Held()}, slots=1):
        client = await login(srv, settings)
        try:
            for n in range(28):
                resp = await client.post("/api/v1/tasks", json={
                    "description": f"Batch job {n}",
                    "plan": [{"name": "hold", "description": "held", "tool": "echo"}]})
                assert resp.status_code == 201, resp.text
            for text in ("Compare two databases", "compare TWO queues"):
                resp = await client.post("/api/v1/tasks", json={
                    "description": text, "workflow": "pipeline"})
                assert resp.status_code == 201, resp.text
            async with browser_page("task-list", srv.url) as watched:
                page = watched.page
                await sign_in(page, "alice")
                rows = page.locator("table[aria-label='Your tasks'] tbody tr")
                info = page.locator("#page-info")
                await expect(rows).to_have_count(25)
                await expect(info).to_have_text(f"1{DASH}25 of 30")
                await expect(rows.first).to_contain_text("compare TWO queues")  # newest first
                await page.get_by_role("button", name="Older").click()
                await expect(page).to_have_url(re.compile(r"/\?page=2$"))
                await expect(info).to_have_text(f"26{DASH}30 of 30")
                await expect(rows.last).to_contain_text("Batch job 0")

                await page.get_by_label("Search").fill("COMPARE two")
                await page.get_by_role("button", name="Filter").click()
                await expect(rows).to_have_count(2)
                await expect(info).to_have_text(f"1{DASH}2 of 2")
                await expect(rows.first.locator("td").nth(1)).to_have_text("pipeline")
                await page.reload()  # the filters live in the address
                await expect(page.get_by_label("Search")).to_have_value("COMPARE two")
                await expect(rows).to_have_count(2)

                page.once("dialog", lambda dialog: asyncio.ensure_future(dialog.accept()))
                await page.get_by_role("button", name="Cancel Compare two databases").click()
                cancelled = rows.filter(has_text="Compare two databases")
                await expect(cancelled.locator(".badge")).to_have_text("cancelled")
                await expect(cancelled.get_by_role("button")).to_be_hidden()

                await page.get_by_label("Search").fill("")
                await page.get_by_label("Status").select_option("cancelled")
                await expect(rows).to_have_count(1)
                await expect(rows.first).to_contain_text("Compare two databases")
                await page.get_by_label("Status").select_option("")
                await page.get_by_label("Workflow").select_option("dag")
                await expect(info).to_have_text(f"1{DASH}25 of 28")
                watched.clean()
        finally:
            await client.aclose()
