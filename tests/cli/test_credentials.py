"""Sessions kept in the user's config directory: `shoal login` from one folder serves every
other, `shoal logout` forgets, and a refresh token (which works once) is renewed once when
commands race."""

from __future__ import annotations

import asyncio
import stat
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from shoal import admin
from shoal.api.server import RunningServer, running_server
from shoal.cli.client import ShoalClient, sign_in
from shoal.cli.credentials import CREDENTIALS_FILE, CredentialStore
from shoal.store import accounts
from tests.cli.harness import Run, finish, start
from tests.conftest import make_settings

PASSWORD = "password123"


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[RunningServer]:
    """A control plane whose access tokens last a minute (so every session is due for
    renewal at once) and user alice."""
    settings = make_settings(tmp_path, access_token_minutes=1)
    async with running_server(settings) as srv:
        await admin.create_user(srv.services.db, settings, username="alice", password=PASSWORD)
        yield srv


async def shoal(cwd: Path, config: Path, *args: str) -> Run:
    """`shoal ARGS` run in the folder `cwd`, keeping its sessions under `config`."""
    return await asyncio.to_thread(lambda: finish(start(cwd, *args,
                                                        XDG_CONFIG_HOME=str(config))))


async def test_login_serves_every_folder_until_logout(server: RunningServer,
                                                      tmp_path: Path) -> None:
    """A session from `shoal login` in one folder signs in `shoal tasks` in another (no
    SHOAL_URL), its file readable by the owner only; `shoal logout` forgets it."""
    config = tmp_path / "config"
    signed = await shoal(tmp_path / "a", config, "login", "--server", server.url,
                         "--username", "alice", "--password", PASSWORD)
    assert signed.returncode == 0, signed.stderr
    assert f"Signed in to {server.url} as alice" in signed.stdout
    kept = config / "shoal" / CREDENTIALS_FILE
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    assert stat.S_IMODE(kept.parent.stat().st_mode) == 0o700
    listed = await shoal(tmp_path / "b", config, "tasks")
    assert listed.returncode == 0, listed.stderr
    assert "0 of 0" in listed.stdout
    out = await shoal(tmp_path / "b", config, "logout")
    assert out.returncode == 0, out.stderr
    assert f"Signed out of {server.url}" in out.stdout
    refused = await shoal(tmp_path / "b", config, "tasks")
    assert refused.returncode == 1
    assert "shoal login --server URL" in refused.stderr
    assert "Traceback" not in refused.stderr + refused.stdout


async def test_a_wrong_password_keeps_nothing(server: RunningServer, tmp_path: Path) -> None:
    """A refused sign-in says why, exits 1, and writes no session."""
    config = tmp_path / "config"
    refused = await shoal(tmp_path, config, "login", "--server", server.url,
                          "--username", "alice", "--password", "not-it")
    assert refused.returncode == 1
    assert "Wrong username or password." in refused.stderr
    assert not (config / "shoal" / CREDENTIALS_FILE).exists()


async def test_racing_commands_renew_a_session_once(server: RunningServer,
                                                    tmp_path: Path) -> None:
    """Two clients finding the kept access token due renew it once between them (the second
    takes the pair the first kept): the sign-in survives, where sending one refresh token
    twice would have ended it."""
    store = CredentialStore(tmp_path / "config" / CREDENTIALS_FILE)
    first = await sign_in(server.url, username="alice", password=PASSWORD)
    store.save(first)
    clients = [ShoalClient(first, store=store) for _ in range(2)]
    try:
        pages = await asyncio.gather(*(c.request("GET", "/api/v1/tasks") for c in clients))
        assert [p["total"] for p in pages] == [0, 0]
        renewed = store.session(server.url)
        assert renewed is not None
        assert renewed.refresh_token != first.refresh_token
        assert [c.creds for c in clients] == [renewed, renewed]
    finally:
        for c in clients:
            await c.__aexit__()
    async with ShoalClient(renewed, store=store) as later:  # the sign-in still renews
        await later.request("GET", "/api/v1/tasks")
        assert later.creds.refresh_token not in (first.refresh_token, renewed.refresh_token)


async def test_login_with_a_login_links_token(server: RunningServer, tmp_path: Path) -> None:
    """`shoal login --token shl_…` (a one-time link's token, as `shoal up` prints) keeps a
    renewable session for the link's user."""
    db = server.services.db
    async with db.connection() as conn:
        row = await accounts.user_by_name(conn, "alice")
    assert row is not None
    link = await admin.create_login_link_token(db, user_id=row.id)
    config = tmp_path / "config"
    signed = await shoal(tmp_path, config, "login", "--server", server.url, "--token", link)
    assert signed.returncode == 0, signed.stderr
    assert "as alice" in signed.stdout
    kept = CredentialStore(config / "shoal" / CREDENTIALS_FILE).session(server.url)
    assert kept is not None
    assert kept.refresh_token
