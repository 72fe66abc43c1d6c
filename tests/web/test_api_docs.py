"""/docs in a real browser, offline: Swagger UI renders the API's operations from this server's
files alone (every request to another origin is refused and recorded: there is none), under the
dashboard's Content-Security-Policy with no violation, and "Try it out" calls the API."""

from __future__ import annotations

from playwright.async_api import Route, expect

from shoal.api.server import running_server
from shoal.config import Settings
from tests.web.browser import browser_page


async def test_the_api_docs_render_offline_without_a_policy_violation(
        settings: Settings) -> None:
    async with running_server(settings) as srv, browser_page("api-docs", srv.url) as watched:
        page = watched.page
        elsewhere: list[str] = []

        async def only_this_server(route: Route) -> None:
            if route.request.url.startswith(srv.url):
                await route.continue_()
            else:
                elsewhere.append(route.request.url)
                await route.abort()

        await page.route("**/*", only_this_server)
        await page.goto("/redoc")  # sent on to /docs
        await expect(page).to_have_url(f"{srv.url}/docs")
        await expect(page.locator(".swagger-ui .info .title")).to_contain_text("Shoal")
        readyz = page.locator(".opblock", has=page.locator(".opblock-summary-path",
                                                           has_text="/readyz"))
        await readyz.locator(".opblock-summary").click()
        await readyz.get_by_role("button", name="Try it out").click()
        await readyz.get_by_role("button", name="Execute").click()
        await expect(readyz.locator(".live-responses-table tbody .response-col_status")
                     ).to_have_text("200")
        assert elsewhere == []
        watched.clean()  # no console error: a refused script, style or request would be one
