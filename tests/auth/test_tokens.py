"""JWTs for people and opaque tokens for workers and login links."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import jwt
import pytest

from shoal.auth.tokens import (
    WORKER_TOKEN_PREFIX,
    Claims,
    decode_token,
    hash_opaque_token,
    issue_token_pair,
    new_opaque_token,
    opaque_token_matches,
)
from shoal.config import Settings
from shoal.errors import Unauthorized
from shoal.ids import UserId

USER = UserId(uuid.UUID("00000000-0000-4000-8000-00000000abcd"))


@pytest.fixture
def settings() -> Settings:
    """Settings with a known secret, ignoring the environment and any .env file."""
    return Settings(
        mode="dev",
        secret_key="test-secret-" + "x" * 40,
        access_token_minutes=15,
        refresh_token_days=7,
        _env_file=None,
    )


def unverified(token: str) -> dict[str, Any]:
    """The claims of `token`, read without checking anything."""
    claims: dict[str, Any] = jwt.decode(token, options={"verify_signature": False})
    return claims


def test_access_token_round_trips(settings: Settings) -> None:
    """An access token decodes to the user it was issued for."""
    pair = issue_token_pair(USER, username="ada", is_admin=False, settings=settings)
    claims = decode_token(pair.access_token, settings=settings, expected_type="access")
    assert claims == Claims(
        user_id=USER,
        username="ada",
        is_admin=False,
        jti=claims.jti,
        type="access",
        expires_at=claims.expires_at,
    )


def test_refresh_token_round_trips(settings: Settings) -> None:
    """A refresh token decodes as a refresh token for the same user."""
    pair = issue_token_pair(USER, username="ada", is_admin=True, settings=settings)
    claims = decode_token(pair.refresh_token, settings=settings, expected_type="refresh")
    assert (claims.user_id, claims.username, claims.is_admin, claims.type) == (
        USER,
        "ada",
        True,
        "refresh",
    )


def test_access_claims_carry_roles_and_lifetimes(settings: Settings) -> None:
    """Claims hold sub, username, roles, type, iat, exp and jti, with the configured lives."""
    now = datetime.now(UTC).replace(microsecond=0)
    pair = issue_token_pair(USER, username="ada", is_admin=True, settings=settings, now=now)
    access, refresh = unverified(pair.access_token), unverified(pair.refresh_token)
    assert access["sub"] == str(USER)
    assert access["roles"] == ["user", "admin"]
    assert access["type"] == "access"
    assert access["iat"] == int(now.timestamp())
    assert access["exp"] == int((now + timedelta(minutes=15)).timestamp())
    assert refresh["type"] == "refresh"
    assert refresh["exp"] == int((now + timedelta(days=7)).timestamp())
    assert pair.token_type == "bearer"
    assert pair.expires_in == 15 * 60


def test_plain_user_has_only_the_user_role(settings: Settings) -> None:
    """A non-admin's tokens say roles ["user"] and decode with `is_admin` false."""
    pair = issue_token_pair(USER, username="bob", is_admin=False, settings=settings)
    assert unverified(pair.access_token)["roles"] == ["user"]
    assert not decode_token(pair.access_token, settings=settings, expected_type="access").is_admin


def test_every_token_has_its_own_jti(settings: Settings) -> None:
    """Access and refresh tokens, and successive pairs, never share a jti."""
    pairs = [
        issue_token_pair(USER, username="a", is_admin=False, settings=settings) for _ in range(2)
    ]
    jtis = {unverified(t)["jti"] for p in pairs for t in (p.access_token, p.refresh_token)}
    assert len(jtis) == 4


def test_expired_access_token_is_unauthorized(settings: Settings) -> None:
    """An access token past its expiry is refused with a message saying so."""
    long_ago = datetime.now(UTC) - timedelta(minutes=16)
    pair = issue_token_pair(USER, username="ada", is_admin=False, settings=settings, now=long_ago)
    with pytest.raises(Unauthorized, match="expired") as caught:
        decode_token(pair.access_token, settings=settings, expected_type="access")
    assert caught.value.code == "token_expired"


def test_refresh_token_outlives_the_access_token(settings: Settings) -> None:
    """When the access token has expired the refresh token still works."""
    earlier = datetime.now(UTC) - timedelta(hours=1)
    pair = issue_token_pair(USER, username="ada", is_admin=False, settings=settings, now=earlier)
    assert decode_token(pair.refresh_token, settings=settings, expected_type="refresh")


@pytest.mark.parametrize(("sent", "expected"), [("refresh", "access"), ("access", "refresh")])
def test_wrong_token_type_is_unauthorized(settings: Settings, sent: str, expected: str) -> None:
    """A refresh token is no access token, and the other way round."""
    pair = issue_token_pair(USER, username="ada", is_admin=False, settings=settings)
    token = pair.refresh_token if sent == "refresh" else pair.access_token
    with pytest.raises(Unauthorized, match=f"Expected the {expected} token"):
        decode_token(token, settings=settings, expected_type=expected)  # type: ignore[arg-type]


def test_token_signed_with_another_secret_is_unauthorized(settings: Settings) -> None:
    """A token from a server with a different secret is refused."""
    other = settings.model_copy(update={"secret_key": "another-secret-" + "y" * 40})
    pair = issue_token_pair(USER, username="ada", is_admin=False, settings=other)
    with pytest.raises(Unauthorized, match="not valid"):
        decode_token(pair.access_token, settings=settings, expected_type="access")


def test_tampered_token_is_unauthorized(settings: Settings) -> None:
    """Changing a claim breaks the signature."""
    pair = issue_token_pair(USER, username="ada", is_admin=False, settings=settings)
    header, _, signature = pair.access_token.split(".")
    forged = jwt.encode({**unverified(pair.access_token), "roles": ["user", "admin"]}, "k" * 32)
    with pytest.raises(Unauthorized):
        decode_token(
            f"{header}.{forged.split('.')[1]}.{signature}",
            settings=settings,
            expected_type="access",
        )


def test_unsigned_token_is_unauthorized(settings: Settings) -> None:
    """A token with `alg: none` is refused."""
    pair = issue_token_pair(USER, username="a", is_admin=True, settings=settings)
    unsigned = jwt.encode(unverified(pair.access_token), None, algorithm="none")
    with pytest.raises(Unauthorized):
        decode_token(unsigned, settings=settings, expected_type="access")


@pytest.mark.parametrize("token", ["", "garbage", "a.b.c", "shw_notajwt"])
def test_garbage_is_unauthorized(settings: Settings, token: str) -> None:
    """Anything that is not a JWT is refused with `Unauthorized`."""
    with pytest.raises(Unauthorized, match="Sign in again"):
        decode_token(token, settings=settings, expected_type="access")


def test_opaque_token_has_its_prefix_and_hash() -> None:
    """A new opaque token starts with its prefix and comes with its SHA-256."""
    token, token_hash = new_opaque_token(WORKER_TOKEN_PREFIX)
    assert token.startswith("shw_")
    assert len(token) >= len("shw_") + 43  # 32 random bytes, base64url
    assert token_hash == hash_opaque_token(token)
    assert len(token_hash) == 64


def test_opaque_tokens_are_unique() -> None:
    """Two new tokens differ, and so do their hashes."""
    first, second = new_opaque_token("shl_"), new_opaque_token("shl_")
    assert first[0] != second[0]
    assert first[1] != second[1]


def test_opaque_token_matches_only_its_own_hash() -> None:
    """`opaque_token_matches` accepts the right token and refuses any other."""
    token, token_hash = new_opaque_token(WORKER_TOKEN_PREFIX)
    assert opaque_token_matches(token, token_hash)
    assert not opaque_token_matches(token + "x", token_hash)
    assert not opaque_token_matches(token, "")
