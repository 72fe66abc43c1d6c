"""Security headers and CORS, on a real control plane: the dashboard's policy allows no
inline script or style; every answer says nosniff, no referrer, no framing; API answers are
never stored; HSTS only when the settings say HTTPS; CORS only for the origins listed."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from shoal.api.server import RunningServer, running_server
from tests.conftest import make_settings

COMMON = {"x-content-type-options": "nosniff", "referrer-policy": "no-referrer",
          "x-frame-options": "DENY"}


def policy(header: str) -> dict[str, list[str]]:
    """A Content-Security-Policy as {directive: [sources]}."""
    parsed: dict[str, list[str]] = {}
    for part in header.split(";"):
        words = part.split()
        if words:
            parsed[words[0]] = words[1:]
    return parsed


def assert_common(resp: httpx.Response) -> None:
    for name, value in COMMON.items():
        assert resp.headers.get(name) == value, (resp.url, name, resp.headers)
    assert "strict-transport-security" not in resp.headers


@pytest.mark.parametrize("path", ["/", "/login", "/tasks/x", "/workers", "/new", "/settings",
                                  "/workflows"])
async def test_dashboard_pages_allow_no_inline_script_or_style(
    server: RunningServer, path: str
) -> None:
    """Each dashboard page: scripts and styles from its own origin only (no
    'unsafe-inline', no 'unsafe-eval', no data: or other hosts), no framing, no plugins."""
    async with httpx.AsyncClient(base_url=server.url) as anon:
        resp = await anon.get(path)
    assert resp.status_code == 200
    assert_common(resp)
    csp = policy(resp.headers["content-security-policy"])
    for directive in ("script-src", "style-src", "default-src"):
        assert csp[directive] == ["'self'"], (directive, csp)
    assert csp["frame-ancestors"] == ["'none'"]
    assert csp["object-src"] == ["'none'"]
    assert csp["base-uri"] == ["'none'"]
    assert "unsafe" not in resp.headers["content-security-policy"]


async def test_the_dashboards_html_has_no_inline_script_or_style(server: RunningServer) -> None:
    """The shell itself would break under its policy if it had inline code or styles."""
    async with httpx.AsyncClient(base_url=server.url) as anon:
        html = (await anon.get("/")).text
    assert "<style" not in html
    assert " style=" not in html
    scripts = html.split("<script")[1:]
    assert scripts
    assert all(tag.startswith(' type="module" src="/static/') for tag in scripts)
    assert not re.search(r"\son[a-z]+\s*=", html)  # no onclick= and the like


async def test_the_api_docs_load_only_this_servers_files_under_the_same_policy(
    server: RunningServer
) -> None:
    """/docs carries the dashboard's policy, has no inline script or style, and every script
    and stylesheet it names is a path on this server, which serves it; /redoc sends people to
    /docs; none of them is in the OpenAPI document."""
    async with httpx.AsyncClient(base_url=server.url) as anon:
        page = await anon.get("/docs")
        assert page.status_code == 200
        assert_common(page)
        assert page.headers["content-security-policy"] == (await anon.get("/")).headers[
            "content-security-policy"]
        html = page.text
        assert "<style" not in html
        assert " style=" not in html
        scripts = re.findall(r"<script\b([^>]*)>", html)
        assert scripts
        assert all(re.search(r'\ssrc="/[^/]', attrs) for attrs in scripts), "no inline script"
        named = re.findall(r'<(?:script|link)\b[^>]*\s(?:src|href)="([^"]+)"', html)
        assert {path.rsplit(".", 1)[-1] for path in named} == {"js", "css", "png"}
        for path in named:
            assert re.match(r"/[^/]", path), f"{path} is not a path on this server"
            asset = await anon.get(path)
            assert asset.status_code == 200, path
            assert_common(asset)
        assert (await anon.get("/apidocs/swagger-ui-bundle.js")).headers[
            "content-type"].startswith(("text/javascript", "application/javascript"))
        moved = await anon.get("/redoc")
        assert moved.status_code == 308
        assert moved.headers["location"] == "/docs"
        paths = (await anon.get("/openapi.json")).json()["paths"]
    assert not [p for p in paths if p.startswith(("/docs", "/redoc", "/apidocs"))]


async def test_static_files_say_nosniff(server: RunningServer) -> None:
    async with httpx.AsyncClient(base_url=server.url) as anon:
        for path in ("/static/app.js", "/static/app.css"):
            resp = await anon.get(path)
            assert resp.status_code == 200
            assert_common(resp)


async def test_api_answers_are_never_stored(
    server: RunningServer, client: httpx.AsyncClient
) -> None:
    """A signed-in answer, a sign-in's tokens, and an error: nosniff and no-store."""
    me = await client.get("/api/v1/users/me")
    assert me.status_code == 200
    refused = await client.get("/api/v1/users/me", headers={"Authorization": "Bearer nope"})
    assert refused.status_code == 401
    async with httpx.AsyncClient(base_url=server.url) as anon:
        tokens = await anon.post("/api/v1/auth/login",
                                 json={"username": "alice", "password": "password123"})
        missing = await anon.get("/api/v1/no-such-route")
    assert tokens.status_code == 200
    for resp in (me, refused, tokens, missing):
        assert_common(resp)
        assert resp.headers["cache-control"] == "no-store", resp.url
        assert resp.headers["content-type"].startswith("application/json")


async def test_a_refused_body_carries_the_headers(server: RunningServer) -> None:
    """The body limit answers before any route; its 413 is dressed all the same."""
    async with httpx.AsyncClient(base_url=server.url) as anon:
        resp = await anon.post("/api/v1/auth/login", content=b"x" * (17 * 1024 * 1024),
                               headers={"content-type": "application/json"})
    assert resp.status_code == 413
    assert_common(resp)


async def test_hsts_only_when_the_settings_say_https(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, hsts_max_age=31536000)
    async with running_server(settings) as srv, httpx.AsyncClient(base_url=srv.url) as anon:
        for path in ("/", "/api/v1/users/me", "/static/app.js"):
            resp = await anon.get(path)
            assert resp.headers["strict-transport-security"] == "max-age=31536000", path


# ---- CORS -------------------------------------------------------------------------------------

LISTED = "https://app.example.com"
UNLISTED = "https://evil.example"


def preflight(origin: str) -> dict[str, str]:
    return {"Origin": origin, "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type"}


async def test_no_cors_by_default(server: RunningServer, client: httpx.AsyncClient) -> None:
    """With no origins set, a page of another origin gets no CORS header, so its browser
    keeps the answer from it: neither a preflight nor a plain request is allowed."""
    async with httpx.AsyncClient(base_url=server.url) as anon:
        pre = await anon.options("/api/v1/tasks", headers=preflight(LISTED))
    assert "access-control-allow-origin" not in pre.headers
    assert "access-control-allow-credentials" not in pre.headers
    plain = await client.get("/api/v1/users/me", headers={"Origin": LISTED})
    assert plain.status_code == 200
    assert "access-control-allow-origin" not in plain.headers


async def test_cors_for_the_listed_origins_only(tmp_path: Path) -> None:
    """A listed origin's preflight is allowed, credentials included, for the headers the
    API reads; its answers name it and expose `Retry-After`. An unlisted origin gets no
    allow header, on the preflight or on the answer."""
    settings = make_settings(tmp_path, cors_origins=[LISTED + "/"])
    async with running_server(settings) as srv, httpx.AsyncClient(base_url=srv.url) as anon:
        allowed = await anon.options("/api/v1/tasks", headers=preflight(LISTED))
        assert allowed.status_code == 200
        assert allowed.headers["access-control-allow-origin"] == LISTED
        assert allowed.headers["access-control-allow-credentials"] == "true"
        assert "authorization" in allowed.headers["access-control-allow-headers"].lower()
        assert "POST" in allowed.headers["access-control-allow-methods"]

        refused = await anon.options("/api/v1/tasks", headers=preflight(UNLISTED))
        assert refused.status_code == 400
        assert "access-control-allow-origin" not in refused.headers
        assert "access-control-allow-credentials" not in refused.headers

        answer = await anon.get("/api/v1/users/me", headers={"Origin": LISTED})
        assert answer.status_code == 401
        assert answer.headers["access-control-allow-origin"] == LISTED
        assert answer.headers["access-control-allow-credentials"] == "true"
        assert "retry-after" in answer.headers["access-control-expose-headers"].lower()
        assert_common(answer)

        other = await anon.get("/api/v1/users/me", headers={"Origin": UNLISTED})
        assert "access-control-allow-origin" not in other.headers
        assert "access-control-allow-credentials" not in other.headers


def test_a_wildcard_origin_is_refused(tmp_path: Path) -> None:
    """`*` (any site, with its visitors' credentials) is not an origin; nor is a path."""
    for bad in ("*", "https://app.example.com/path", "app.example.com"):
        with pytest.raises(ValueError, match="not an origin"):
            make_settings(tmp_path, cors_origins=[bad])
