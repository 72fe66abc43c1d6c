"""The API's reference page, /docs (Swagger UI), from this control plane alone: its script and
styles are the installed `fastapi-offline` package's copy of Swagger UI, served under
/apidocs/, never a CDN, so the page works offline; and it carries the dashboard's
Content-Security-Policy (scripts and styles from this origin only, no inline code). FastAPI's
own page would load Swagger UI from a CDN and start it with an inline script: here
/static/apidocs.js starts it.

/redoc sends people to /docs: ReDoc injects its styles as inline `<style>` elements (some before
it reads a nonce), which this policy refuses, and allowing them would take `'unsafe-inline'`."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles

from shoal.web.pages import CSP

ASSETS = "/apidocs"  # Swagger UI's files
PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Shoal API</title>
<link rel="icon" href="{assets}/favicon.png">
<link rel="stylesheet" href="{assets}/swagger-ui.css">
<script src="{assets}/swagger-ui-bundle.js" defer></script>
<script src="/static/apidocs.js" defer></script>
</head>
<body>
<div id="swagger-ui" data-openapi="{openapi}"></div>
</body>
</html>
"""


def assets_dir() -> Path:
    """Where the installed Swagger UI files are."""
    return Path(str(resources.files("fastapi_offline").joinpath("static")))


def add_api_docs(app: FastAPI) -> None:
    """Serve /docs and its files, and send /redoc there (the app is made with FastAPI's own
    pages off: `docs_url=None, redoc_url=None`)."""
    page = PAGE.format(assets=ASSETS, openapi=app.openapi_url or "/openapi.json")

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui() -> HTMLResponse:
        """Swagger UI on this API's OpenAPI document."""
        return HTMLResponse(page, headers={"Content-Security-Policy": CSP,
                                           "Cache-Control": "no-cache"})

    @app.get("/redoc", include_in_schema=False)
    async def redoc() -> RedirectResponse:
        """The API's reference is /docs."""
        return RedirectResponse("/docs", status_code=308)

    app.mount(ASSETS, StaticFiles(directory=assets_dir()), name="apidocs")
