"""Forged and misused JWTs, sent to real routes of a real control plane: each is refused with
401 in the error shape. An access token goes to `GET /api/v1/users/me` (and the client
WebSocket), a refresh token to `POST /api/v1/auth/refresh`."""

from __future__ import annotations

import asyncio
import base64
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import jwt
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from shoal.api.server import RunningServer
from shoal.auth.tokens import _signing_key
from shoal.config import Settings
from tests.auth.conftest import assert_refused, sign_in

ME = "/api/v1/users/me"
REFRESH = "/api/v1/auth/refresh"


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def claims_of(token: str) -> dict[str, Any]:
    return dict(jwt.decode(token, options={"verify_signature": False}))


def unsigned(claims: dict[str, Any], alg: str = "none") -> str:
    """The token with `alg` in its header and no signature at all."""
    header = b64(json.dumps({"alg": alg, "typ": "JWT"}).encode())
    return f"{header}.{b64(json.dumps(claims).encode())}."


def tampered(token: str, **changes: Any) -> str:
    """The token with its claims changed and its header and signature kept."""
    header, _, signature = token.split(".")
    body = b64(json.dumps({**claims_of(token), **changes}).encode())
    return f"{header}.{body}.{signature}"


def signed(claims: dict[str, Any], key: bytes | str, alg: str = "HS256") -> str:
    return jwt.encode(claims, key, algorithm=alg)


def forgeries(pair: dict[str, str], settings: Settings, kind: str) -> dict[str, str]:
    """The ways to forge or misuse a token of `kind` ("access" or "refresh")."""
    token = pair[f"{kind}_token"]
    claims = claims_of(token)
    other = pair["refresh_token" if kind == "access" else "access_token"]
    past = datetime.now(UTC) - timedelta(days=400)
    key = _signing_key(settings)
    made = {
        "alg none": unsigned(claims),
        "alg None": unsigned(claims, "None"),
        "alg HS256, no signature": unsigned(claims, "HS256"),
        "wrong key": signed(claims, "not-the-server-key-" + "x" * 40),
        "the raw secret as key": signed(claims, settings.secret_key),
        "another HMAC algorithm": signed(claims, key * 2, "HS512"),  # 64 bytes: its minimum
        "claims made admin, signature kept": tampered(token, roles=["user", "admin"]),
        "another user, signature kept": tampered(
            token, sub="00000000-0000-4000-8000-000000000001"),
        "expiry moved, signature kept": tampered(token, exp=4_000_000_000),
        "the other kind of token": other,
        "expired, rightly signed": signed({**claims, "iat": past,
                                           "exp": past + timedelta(minutes=1)}, key),
        "no expiry, rightly signed": signed({k: v for k, v in claims.items() if k != "exp"},
                                            key),
        "not a JWT": "not.a.jwt",
    }
    assert list(made) == CASES
    return made


CASES = ["alg none", "alg None", "alg HS256, no signature", "wrong key",
         "the raw secret as key", "another HMAC algorithm", "claims made admin, signature kept",
         "another user, signature kept", "expiry moved, signature kept",
         "the other kind of token", "expired, rightly signed", "no expiry, rightly signed",
         "not a JWT"]


async def test_forged_access_tokens_are_refused(
    auth_server: RunningServer, auth_settings: Settings, anon: httpx.AsyncClient
) -> None:
    """Each forged or misused access token: 401, the error shape, `WWW-Authenticate`."""
    pair = await sign_in(auth_server, auth_settings, anon)
    assert (await anon.get(ME, headers={"Authorization": f"Bearer {pair['access_token']}"})
            ).status_code == 200  # the real one works
    for case, token in forgeries(pair, auth_settings, "access").items():
        resp = await anon.get(ME, headers={"Authorization": f"Bearer {token}"})
        assert_refused(resp, "token_expired" if case.startswith("expired") else None, case)


async def test_forged_refresh_tokens_are_refused(
    auth_server: RunningServer, auth_settings: Settings, anon: httpx.AsyncClient
) -> None:
    """Each forged or misused refresh token: 401 in the error shape; and none of them
    counts as a use of the real token, which still works afterwards."""
    pair = await sign_in(auth_server, auth_settings, anon)
    for case, token in forgeries(pair, auth_settings, "refresh").items():
        resp = await anon.post(REFRESH, json={"refresh_token": token})
        assert_refused(resp, "token_expired" if case.startswith("expired") else None, case)
    assert (await anon.post(REFRESH, json={"refresh_token": pair["refresh_token"]})
            ).status_code == 200


async def test_forged_tokens_open_no_websocket(
    auth_server: RunningServer, auth_settings: Settings, anon: httpx.AsyncClient
) -> None:
    """The client WebSocket closes at once for a forged token, as for no token."""
    pair = await sign_in(auth_server, auth_settings, anon)
    url = auth_server.url.replace("http://", "ws://") + "/ws"
    for case, token in forgeries(pair, auth_settings, "access").items():
        async with connect(f"{url}?token={token}", open_timeout=10) as ws:
            with pytest.raises(ConnectionClosed):
                await asyncio.wait_for(ws.recv(), timeout=10)
            assert ws.close_code is not None, case
