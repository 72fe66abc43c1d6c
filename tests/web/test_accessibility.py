"""The dashboard without a mouse and on a tablet, in a real browser: sign in, open a task, a
subtask and a file with the keyboard alone; every control has a name a screen reader can say;
at a tablet's width no page scrolls sideways; the dark theme holds across pages."""

from __future__ import annotations

import re

from playwright.async_api import Page, expect

from shoal.api.server import running_server
from shoal.config import Settings
from tests.runtime.harness import echo_worker, login, sse_events, submit
from tests.web.browser import browser_page

# Controls without a name a screen reader could say: no <label>, no aria-label, no text.
UNNAMED = """() => [...document.querySelectorAll("button, input, select, textarea, a[href]")]
  .filter((el) => el.offsetParent !== null)
  .filter((el) => !(el.labels && el.labels.length) && !el.getAttribute("aria-label")
                  && !el.textContent.trim() && !el.getAttribute("placeholder"))
  .map((el) => el.outerHTML.slice(0, 120))"""
SIDEWAYS = "() => document.documentElement.scrollWidth - document.documentElement.clientWidth"


async def named_and_fitting(page: Page) -> None:
    assert await page.evaluate(UNNAMED) == []
    assert await page.evaluate(SIDEWAYS) <= 0


async def test_the_keyboard_alone_gets_around(settings: Settings) -> None:
    async with running_server(settings) as srv, echo_worker(srv, settings):
        client = await login(srv, settings)
        try:
            task_id = await submit(client, [
                {"name": "First step", "description": "one", "tool": "echo",
                 "options": {"files": {"notes.md": "# Notes\n"}}},
                {"name": "Second step", "description": "two", "tool": "echo",
                 "dependencies": [0]}], description="A task for the keyboard")
            await sse_events(client, task_id, until={"task_complete"})
            async with browser_page("keyboard", srv.url) as watched:
                page = watched.page
                await page.goto("/login")
                await expect(page.get_by_label("Username")).to_be_focused()  # focus starts there
                await page.keyboard.type("alice")
                await page.keyboard.press("Tab")
                await page.keyboard.type("password123")
                await page.keyboard.press("Enter")
                await expect(page.get_by_text("Signed in as alice")).to_be_visible()
                await named_and_fitting(page)
                link = page.get_by_role("link", name="A task for the keyboard")
                await link.focus()
                await page.keyboard.press("Enter")
                await expect(page).to_have_url(re.compile(f"/tasks/{task_id}$"))
                node = page.locator("#graph .node", has_text="First step")
                await node.focus()
                await page.keyboard.press("Enter")
                await expect(node).to_have_attribute("aria-pressed", "true")
                file = page.locator("ul.files").get_by_role("button", name="notes.md")
                await file.focus()
                await page.keyboard.press("Enter")
                await expect(page.locator("#file-code")).to_contain_text("# Notes")
                await named_and_fitting(page)
                await page.get_by_role("link", name="New task").focus()
                await page.keyboard.press("Enter")
                await expect(page.get_by_label("What should be done?")).to_be_focused()
                await named_and_fitting(page)
                watched.clean()
        finally:
            await client.aclose()


async def test_a_tablet_and_the_dark_theme(settings: Settings) -> None:
    async with running_server(settings) as srv, echo_worker(srv, settings):
        client = await login(srv, settings)
        try:
            task_id = await submit(client, [
                {"name": f"Step {i}", "description": "d", "tool": "echo"} for i in range(6)],
                description="A task with a rather long description, to see that it wraps "
                            "on a tablet instead of pushing the page sideways")
            await sse_events(client, task_id, until={"task_complete"})
            async with browser_page("tablet", srv.url) as watched:
                page = watched.page
                await page.set_viewport_size({"width": 768, "height": 1024})
                await page.goto("/login")
                await page.get_by_label("Username").fill("alice")
                await page.get_by_label("Password").fill("password123")
                await page.get_by_role("button", name="Sign in").click()
                await expect(page.get_by_text("Signed in as alice")).to_be_visible()
                await named_and_fitting(page)
                await page.get_by_role("button", name=re.compile("theme")).click()
                await expect(page.locator("html")).to_have_attribute("data-theme", "dark")
                assert await page.evaluate(
                    "getComputedStyle(document.body).backgroundColor") == "rgb(18, 22, 28)"
                await page.goto(f"/tasks/{task_id}")
                await expect(page.locator("#task-status")).to_have_text("completed")
                await expect(page.locator("html")).to_have_attribute("data-theme", "dark")
                await named_and_fitting(page)
                await page.get_by_role("link", name="Workers").click()
                await expect(page.locator("table[aria-label='Workers'] tbody tr")).to_have_count(1)
                await named_and_fitting(page)
                watched.clean()
        finally:
            await client.aclose()
