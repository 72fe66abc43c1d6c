"""The dashboard renews its session once however many requests find the access token stale:
a refresh token works once, and a second use of one would end the sign-in (tests/auth)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from playwright.async_api import Route

from shoal import admin
from shoal.api.server import running_server
from shoal.config import Settings
from tests.web.browser import Watched, browser_page, sign_in

THREE_AT_ONCE = """async () => {
  const {api, session} = await import("/static/core.js");
  sessionStorage.setItem("shoal.access", "stale");
  const answers = await Promise.all([
    api("/api/v1/users/me"), api("/api/v1/tasks"), api("/api/v1/users/me")]);
  return {names: [answers[0].username, answers[2].username], again: await session.renew()};
}"""


@contextlib.asynccontextmanager
async def signed_in(settings: Settings, name: str) -> AsyncIterator[tuple[Watched, list[str]]]:
    """A dashboard page signed in as ada, and the renewals (refresh requests) it then makes."""
    async with running_server(settings) as srv:
        await admin.create_user(srv.services.db, settings, username="ada",
                                password="password123")
        async with browser_page(name, srv.url) as watched:
            await sign_in(watched.page, "ada")
            refreshes: list[str] = []
            watched.page.on("request", lambda r: refreshes.append(r.url)
                            if r.url.endswith("/api/v1/auth/refresh") else None)
            yield watched, refreshes


async def test_requests_that_find_the_token_stale_share_one_renewal(settings: Settings) -> None:
    async with signed_in(settings, "session-renewal") as (watched, refreshes):
        result = await watched.page.evaluate(THREE_AT_ONCE)
        # One renewal for the three requests, then one more (asked for): both worked, so the
        # sign-in is still alive.
        assert result == {"names": ["ada", "ada"], "again": True}
        assert len(refreshes) == 2
        # The stale token's 401s are logged by the browser; nothing else went wrong.
        assert [e for e in watched.errors if "status of 401" not in e] == []


async def test_a_401_that_comes_after_the_renewal_retries_with_its_token(
    settings: Settings,
) -> None:
    """A request sent with the stale token whose 401 comes back only after another request's
    renewal has ended retries with the token that renewal brought: no second renewal. (Under
    load the three requests above once met this by chance, and renewed twice.)"""
    async with signed_in(settings, "session-renewal-late") as (watched, refreshes):
        page = watched.page

        async def after_the_renewal(route: Route) -> None:
            # the list of tasks reaches the server only once the renewal is done
            await page.wait_for_function(
                "() => !['stale', null].includes(sessionStorage.getItem('shoal.access'))")
            await route.continue_()

        await page.route("**/api/v1/tasks", after_the_renewal)
        result = await page.evaluate(THREE_AT_ONCE)
        assert result == {"names": ["ada", "ada"], "again": True}
        assert len(refreshes) == 2  # the three requests' renewal, and the one asked for
        assert [e for e in watched.errors if "status of 401" not in e] == []
