"""The workers page in a real browser: a worker's tools, resource sparklines and recent attempts
(at your own tasks only), and an admin's worker tokens: created with the secret shown once,
listed, revoked."""

from __future__ import annotations

import asyncio
import re

from playwright.async_api import expect

from shoal import admin
from shoal.api.server import running_server
from shoal.config import Settings
from tests.runtime.harness import echo_worker, login, sse_events, submit
from tests.web.browser import browser_page, sign_in


async def test_an_admin_sees_work_and_manages_tokens(settings: Settings) -> None:
    async with running_server(settings) as srv, echo_worker(srv, settings):
        await admin.create_user(srv.services.db, settings, username="root",
                                password="password123", admin=True)
        bob = await login(srv, settings, "bob")
        try:
            task_id = await submit(bob, [{"name": "Bobs job", "description": "d",
                                          "tool": "echo"}])
            await sse_events(bob, task_id, until={"task_complete"})
            async with browser_page("workers-admin", srv.url) as watched:
                page = watched.page
                await sign_in(page, "root")
                await page.get_by_role("link", name="Workers").click()
                row = page.locator("table[aria-label='Workers'] tbody tr").first
                await expect(row).to_contain_text("echo")
                # heartbeats (every 0.5 s here) draw each resource's sparkline
                await expect(row.locator("svg.spark")).to_have_count(3)
                await expect(row.locator("td[data-resource=cpu_percent] svg")).to_have_attribute(
                    "aria-label", re.compile(r"^cpu over the last \d+ heartbeats"))
                await row.get_by_role("button").click()
                history = page.locator("#worker-history")
                await expect(history).to_contain_text("Bobs job")  # an admin sees all

                await page.get_by_label("Name").fill("laptop")
                await page.get_by_role("button", name="Create token").click()
                shown = page.locator("#new-token")
                await expect(shown).to_contain_text("shoal worker --server")
                await expect(shown).to_contain_text("not shown again")
                tokens = page.locator("table[aria-label='Worker tokens'] tbody tr")
                laptop = tokens.filter(has_text="laptop")
                await expect(laptop).to_have_count(1)
                page.once("dialog", lambda dialog: asyncio.ensure_future(dialog.accept()))
                await laptop.get_by_role("button", name="Revoke laptop").click()
                await expect(laptop).to_contain_text("revoked")
                watched.clean()
            async with browser_page("workers-user", srv.url) as watched:
                page = watched.page
                await sign_in(page, "bob")
                await page.get_by_role("link", name="Workers").click()
                await page.locator("table[aria-label='Workers'] tbody tr button").first.click()
                await expect(page.locator("#worker-history")).to_contain_text("Bobs job")
                await expect(page.get_by_role("heading", name="Worker tokens")).to_have_count(0)
                watched.clean()
        finally:
            await bob.aclose()


async def test_another_users_work_is_not_in_a_workers_history(settings: Settings) -> None:
    async with running_server(settings) as srv, echo_worker(srv, settings):
        bob = await login(srv, settings, "bob")
        try:
            task_id = await submit(bob, [{"name": "Bobs job", "description": "d",
                                          "tool": "echo"}])
            await sse_events(bob, task_id, until={"task_complete"})
        finally:
            await bob.aclose()
        await admin.create_user(srv.services.db, settings, username="alice",
                                password="password123")
        async with browser_page("workers-other-user", srv.url) as watched:
            page = watched.page
            await sign_in(page, "alice")
            await page.get_by_role("link", name="Workers").click()
            await page.locator("table[aria-label='Workers'] tbody tr button").first.click()
            await expect(page.get_by_text("None at your tasks yet.")).to_be_visible()
            await expect(page.get_by_text("Bobs job")).to_have_count(0)
            watched.clean()
