"""A real browser for the dashboard's tests: Playwright driving Debian's chromium (Playwright's
own browser download cannot work here), a page that records console errors, and a screenshot of
each test's page in `.shoal/screenshots/` (a CI artifact, not committed)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from playwright.async_api import ConsoleMessage, Page, async_playwright

CHROMIUM = Path(os.environ.get("SHOAL_CHROMIUM", "/usr/bin/chromium"))
SCREENSHOTS = Path(__file__).resolve().parents[2] / ".shoal" / "screenshots"
# Without these, chromium keeps calling Google's hosts, which this machine's network refuses.
QUIET = ["--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-quic", "--no-first-run", "--disable-gpu"]


@dataclass
class Watched:
    """A browser page and what went wrong in it."""

    page: Page
    errors: list[str] = field(default_factory=list)

    def clean(self) -> None:
        assert not self.errors, self.errors


def require_chromium() -> Path:
    """Debian's chromium; skipped without it, except under CI (`make setup` installs it)."""
    if CHROMIUM.exists():
        return CHROMIUM
    if os.environ.get("CI") == "true":
        pytest.fail(f"{CHROMIUM} is missing: `make test` installs Debian's chromium "
                    "(apt-get install chromium)")
    pytest.skip(f"{CHROMIUM} is missing (apt-get install chromium)")


@contextlib.asynccontextmanager
async def browser_page(name: str, base_url: str) -> AsyncIterator[Watched]:
    """A fresh browser context on `base_url`; its console errors and uncaught exceptions are
    collected, and a screenshot named `name` is saved when the test ends (failed or not)."""
    executable = require_chromium()
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(executable), args=QUIET)
        try:
            context = await browser.new_context(base_url=base_url)
            page = await context.new_page()
            watched = Watched(page)

            def console(message: ConsoleMessage) -> None:
                if message.type == "error":
                    watched.errors.append(message.text)

            page.on("console", console)
            page.on("pageerror", lambda exc: watched.errors.append(str(exc)))
            try:
                yield watched
            finally:
                SCREENSHOTS.mkdir(parents=True, exist_ok=True)
                await page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)
        finally:
            await browser.close()


async def sign_in(page: Page, username: str, password: str = "password123") -> None:
    """Sign in through the dashboard's form."""
    await page.goto("/login")
    await page.get_by_label("Username").fill(username)
    await page.get_by_label("Password").fill(password)
    await page.get_by_role("button", name="Sign in").click()
    await page.get_by_text(f"Signed in as {username}").wait_for()
