"""A real control plane on each database (SQLite, and PostgreSQL where it is reachable), and
a user to sign in as, for the tests of sign-in, refresh tokens and JWT checks."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from shoal import admin
from shoal.api.server import RunningServer, running_server
from shoal.config import Settings
from tests.conftest import make_settings

PASSWORD = "password123"


@pytest.fixture
def auth_settings(tmp_path: Path, database_url: str) -> Settings:
    """Test settings on a fresh database of each kind."""
    return make_settings(tmp_path, database_url=database_url)


@pytest.fixture
async def auth_server(auth_settings: Settings) -> AsyncIterator[RunningServer]:
    """A control plane on `auth_settings`."""
    async with running_server(auth_settings) as srv:
        yield srv


@pytest.fixture
async def anon(auth_server: RunningServer) -> AsyncIterator[httpx.AsyncClient]:
    """A client that sends no credentials unless a test gives them."""
    async with httpx.AsyncClient(base_url=auth_server.url, timeout=30) as client:
        yield client


async def sign_in(srv: RunningServer, settings: Settings, client: httpx.AsyncClient,
                  name: str = "ada", *, create: bool = True) -> dict[str, Any]:
    """Create `name` (unless told not to) and sign in: the token pair."""
    if create:
        await admin.create_user(srv.services.db, settings, username=name, password=PASSWORD)
    resp = await client.post("/api/v1/auth/login", json={"username": name, "password": PASSWORD})
    assert resp.status_code == 200, resp.text
    return dict(resp.json())


def assert_refused(resp: httpx.Response, code: str | None = None, case: str = "") -> None:
    """401 in the error shape (`{error, message, details}`), with `WWW-Authenticate`;
    `case` names what was sent, for the failure message."""
    assert resp.status_code == 401, (case, resp.status_code, resp.text)
    body = resp.json()
    assert set(body) == {"error", "message", "details"}, (case, body)
    assert body["message"], (case, body)
    assert resp.headers["www-authenticate"] == "Bearer", case
    if code is not None:
        assert body["error"] == code, (case, body)
