"""Refresh tokens rotate: each works once, and one used again revokes its whole family (the
sign-in it descends from), on SQLite and PostgreSQL, against a real control plane."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

import httpx
import jwt
import sqlalchemy as sa

from shoal import admin
from shoal.api.server import RunningServer
from shoal.auth.tokens import _signing_key, issue_token_pair
from shoal.config import Settings
from shoal.store import accounts
from tests.auth.conftest import assert_refused, sign_in

REFRESH = "/api/v1/auth/refresh"


async def refresh(client: httpx.AsyncClient, token: str) -> httpx.Response:
    return await client.post(REFRESH, json={"refresh_token": token})


async def me(client: httpx.AsyncClient, access: str) -> httpx.Response:
    return await client.get("/api/v1/users/me", headers={"Authorization": f"Bearer {access}"})


async def test_each_refresh_gives_the_next_token_of_the_family(
    auth_server: RunningServer, auth_settings: Settings, anon: httpx.AsyncClient
) -> None:
    """A chain of refreshes: each answer's refresh token is new and works once, each access
    token works; all of them are one family."""
    pair = await sign_in(auth_server, auth_settings, anon)
    seen = {pair["refresh_token"]}
    for _ in range(3):
        resp = await refresh(anon, pair["refresh_token"])
        assert resp.status_code == 200, resp.text
        pair = resp.json()
        assert pair["refresh_token"] not in seen
        seen.add(pair["refresh_token"])
        assert (await me(anon, pair["access_token"])).json()["username"] == "ada"
    async with auth_server.services.db.connection() as conn:
        rows = (await conn.execute(sa.select(accounts.refresh_tokens))).all()
    assert len(rows) == 4
    assert len({r.family_id for r in rows}) == 1
    assert sum(r.used_at is None for r in rows) == 1  # only the newest is still usable


async def test_a_reused_token_revokes_its_family(
    auth_server: RunningServer, auth_settings: Settings, anon: httpx.AsyncClient
) -> None:
    """The victim's old token sent after the thief refreshed with it: refused, and the
    thief's newer token stops working too; another sign-in of the same user goes on."""
    first = await sign_in(auth_server, auth_settings, anon)
    other = await sign_in(auth_server, auth_settings, anon, create=False)  # another device
    thief = (await refresh(anon, first["refresh_token"])).json()  # the copy used first
    assert_refused(await refresh(anon, first["refresh_token"]), "refresh_token_reused")
    assert_refused(await refresh(anon, thief["refresh_token"]), "refresh_token_revoked")
    assert_refused(await refresh(anon, first["refresh_token"]), "refresh_token_revoked")
    assert (await refresh(anon, other["refresh_token"])).status_code == 200
    async with auth_server.services.db.connection() as conn:
        families = (await conn.execute(sa.select(accounts.families))).all()
    assert sorted(str(f.revoked_reason) for f in families) == ["None", "reuse"]


async def test_the_thiefs_reuse_of_an_older_token_revokes_too(
    auth_server: RunningServer, auth_settings: Settings, anon: httpx.AsyncClient
) -> None:
    """Any used token of the family, not only the newest's parent, revokes it."""
    pair = await sign_in(auth_server, auth_settings, anon)
    tokens = [pair["refresh_token"]]
    for _ in range(3):
        tokens.append((await refresh(anon, tokens[-1])).json()["refresh_token"])
    assert_refused(await refresh(anon, tokens[0]), "refresh_token_reused")
    assert_refused(await refresh(anon, tokens[-1]), "refresh_token_revoked")


async def test_two_refreshes_with_one_token_at_once_one_wins(
    auth_server: RunningServer, auth_settings: Settings, anon: httpx.AsyncClient
) -> None:
    """Eight refreshes with the same token at the same moment: exactly one 200. The others
    used a used token, so the family is revoked: the winner's token is refused too."""
    pair = await sign_in(auth_server, auth_settings, anon)
    clients = [httpx.AsyncClient(base_url=auth_server.url, timeout=30) for _ in range(8)]
    try:
        answers = await asyncio.gather(*(refresh(c, pair["refresh_token"]) for c in clients))
    finally:
        await asyncio.gather(*(c.aclose() for c in clients))
    statuses = sorted(r.status_code for r in answers)
    assert statuses == [200] + [401] * 7, [r.text for r in answers]
    for lost in (r for r in answers if r.status_code == 401):
        assert lost.json()["error"] in {"refresh_token_reused", "refresh_token_revoked"}
    won = next(r for r in answers if r.status_code == 200).json()
    assert_refused(await refresh(anon, won["refresh_token"]), "refresh_token_revoked")


async def test_a_login_link_starts_a_family_and_works_once(
    auth_server: RunningServer, auth_settings: Settings, anon: httpx.AsyncClient
) -> None:
    """The login-link exchange gives a refresh token that rotates like a password login's;
    the link works once, even when two exchanges race."""
    user_id = await admin.create_user(auth_server.services.db, auth_settings, username="ada",
                                      password="password123")
    link = await admin.create_login_link_token(auth_server.services.db, user_id=user_id)
    clients = [httpx.AsyncClient(base_url=auth_server.url, timeout=30) for _ in range(4)]
    try:
        answers = await asyncio.gather(*(c.post("/api/v1/auth/exchange", json={"token": link})
                                         for c in clients))
    finally:
        await asyncio.gather(*(c.aclose() for c in clients))
    assert sorted(r.status_code for r in answers) == [200, 401, 401, 401]
    pair = next(r for r in answers if r.status_code == 200).json()
    nxt = await refresh(anon, pair["refresh_token"])
    assert nxt.status_code == 200
    assert_refused(await refresh(anon, pair["refresh_token"]), "refresh_token_reused")


async def test_a_signed_token_the_store_never_issued_is_refused(
    auth_server: RunningServer, auth_settings: Settings, anon: httpx.AsyncClient
) -> None:
    """A refresh token with a good signature but no row (issued before this store kept
    them, or its family swept) is refused: the signature alone no longer suffices."""
    pair = await sign_in(auth_server, auth_settings, anon)
    claims = jwt.decode(pair["access_token"], options={"verify_signature": False})
    forged = issue_token_pair(uuid.UUID(claims["sub"]), username="ada", is_admin=False,
                              settings=auth_settings)
    assert_refused(await refresh(anon, forged.refresh_token), "refresh_token_unknown")


async def test_another_users_jti_is_refused(
    auth_server: RunningServer, auth_settings: Settings, anon: httpx.AsyncClient
) -> None:
    """A token whose `sub` is not the user its row was issued to is unknown (even with a
    valid signature, say a key shared by mistake), and revokes nothing."""
    ada = await sign_in(auth_server, auth_settings, anon, "ada")
    bob = await sign_in(auth_server, auth_settings, anon, "bob")
    ada_claims = jwt.decode(ada["refresh_token"], options={"verify_signature": False})
    bob_claims = jwt.decode(bob["refresh_token"], options={"verify_signature": False})
    mixed = jwt.encode({**bob_claims, "jti": ada_claims["jti"]}, _signing_key(auth_settings),
                       algorithm="HS256")
    assert_refused(await refresh(anon, mixed), "refresh_token_unknown")
    assert (await refresh(anon, ada["refresh_token"])).status_code == 200


async def test_expired_families_are_swept_at_sign_in(
    auth_server: RunningServer, auth_settings: Settings, anon: httpx.AsyncClient
) -> None:
    """A sign-in deletes families whose every token has expired, and a refresh deletes its
    family's expired tokens; live ones stay."""
    db = auth_server.services.db
    pair = await sign_in(auth_server, auth_settings, anon)
    long_ago = datetime.now(UTC) - timedelta(days=400)
    user = uuid.UUID(jwt.decode(pair["access_token"], options={"verify_signature": False})["sub"])
    old = uuid.uuid4()
    async with db.begin() as conn:
        live_family = (await conn.execute(sa.select(accounts.families.c.id))).scalar_one()
        await conn.execute(sa.insert(accounts.families).values(
            id=old, user_id=user, created_at=long_ago, expires_at=long_ago + timedelta(days=30)))
        await conn.execute(sa.insert(accounts.refresh_tokens).values([
            {"jti": "old-jti", "family_id": old, "user_id": user, "issued_at": long_ago,
             "expires_at": long_ago + timedelta(days=30), "used_at": None},
            {"jti": "expired-in-live-family", "family_id": live_family, "user_id": user,
             "issued_at": long_ago, "expires_at": long_ago + timedelta(days=30),
             "used_at": long_ago + timedelta(days=1)}]))
    await sign_in(auth_server, auth_settings, anon, create=False)
    async with db.connection() as conn:
        families = set((await conn.execute(sa.select(accounts.families.c.id))).scalars())
        jtis = set((await conn.execute(sa.select(accounts.refresh_tokens.c.jti))).scalars())
    assert old not in families
    assert "old-jti" not in jtis
    assert "expired-in-live-family" in jtis  # a live family's rows go at its next refresh
    assert (await refresh(anon, pair["refresh_token"])).status_code == 200
    async with db.connection() as conn:
        families = set((await conn.execute(sa.select(accounts.families.c.id))).scalars())
        jtis = set((await conn.execute(sa.select(accounts.refresh_tokens.c.jti))).scalars())
    assert "expired-in-live-family" not in jtis
    assert live_family in families
    assert len(families) == 2  # the live family and the second sign-in's
