"""Tokens: signed JWTs for people, opaque random tokens for workers and one-time login links.

People get a short-lived access token and a long-lived refresh token, both HS256 JWTs signed
with a key derived from `Settings.secret_key`. The access token is checked by its signature
alone; the refresh token also by its `jti`, which the store keeps so that it is used once
(`store/accounts.rotate_refresh_token`). Workers and login links get opaque tokens: a
prefix that says what they are, then 32 random bytes. Only their SHA-256 is stored, so a
database leak does not leak usable tokens.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import jwt

from shoal.config import Settings
from shoal.errors import Unauthorized
from shoal.ids import Id, UserId

TokenType = Literal["access", "refresh"]
"""The two kinds of JWT a person holds."""

ALGORITHM = "HS256"
"""The JWT signing algorithm; tokens signed any other way are refused."""

WORKER_TOKEN_PREFIX = "shw_"
"""Prefix of worker tokens (`shoal worker --token shw_…`)."""

LOGIN_LINK_PREFIX = "shl_"
"""Prefix of one-time login link tokens."""

_REQUIRED_CLAIMS = ["sub", "username", "roles", "type", "iat", "exp", "jti"]
# Separates JWT signing from any other use of the same secret; also makes every key 32 bytes.
_KEY_CONTEXT = b"shoal/jwt-signing-key/v1"


@dataclass(frozen=True, slots=True)
class TokenPair:
    """What a successful sign-in returns; `expires_in` is the access token's life in seconds.

    `refresh_jti` and `refresh_expires_at` are what the store keeps of the refresh token, so
    that it is used once only (store/accounts.py); they are not sent to the client."""

    access_token: str
    refresh_token: str
    token_type: str = "bearer"
    expires_in: int = 0
    refresh_jti: str = ""
    refresh_expires_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Claims:
    """The verified contents of a person's token."""

    user_id: UserId
    username: str
    is_admin: bool
    jti: str
    type: TokenType
    expires_at: datetime


def issue_token_pair(
    user_id: uuid.UUID,
    *,
    username: str,
    is_admin: bool,
    settings: Settings,
    now: datetime | None = None,
) -> TokenPair:
    """Sign a fresh access token and refresh token for a person."""
    issued = now or datetime.now(UTC)
    access_life = timedelta(minutes=settings.access_token_minutes)
    refresh_life = timedelta(days=settings.refresh_token_days)
    base = {
        "sub": str(user_id),
        "username": username,
        "roles": ["user", "admin"] if is_admin else ["user"],
        "iat": issued,
    }
    key = _signing_key(settings)
    refresh_jti = secrets.token_urlsafe(16)
    return TokenPair(
        access_token=_sign(base, "access", issued + access_life, key, secrets.token_urlsafe(16)),
        refresh_token=_sign(base, "refresh", issued + refresh_life, key, refresh_jti),
        expires_in=int(access_life.total_seconds()),
        refresh_jti=refresh_jti,
        refresh_expires_at=issued + refresh_life,
    )


def decode_token(token: str, *, settings: Settings, expected_type: TokenType) -> Claims:
    """Verify `token` and return its claims; `Unauthorized` if expired, invalid or mistyped."""
    try:
        payload = jwt.decode(
            token,
            _signing_key(settings),
            algorithms=[ALGORITHM],
            options={"require": _REQUIRED_CLAIMS},
        )
    except jwt.ExpiredSignatureError:
        raise Unauthorized(
            f"Your {expected_type} token has expired. Sign in again.", code="token_expired"
        ) from None
    except jwt.InvalidTokenError as exc:
        raise Unauthorized(
            f"The {expected_type} token is not valid ({exc}). Sign in again."
        ) from None
    if payload["type"] != expected_type:
        raise Unauthorized(
            f"Expected the {expected_type} token but got one of type {payload['type']!r}. "
            f"Send the {expected_type}_token from your sign-in response."
        )
    return _claims(payload, expected_type)


def _sign(base: dict[str, Any], kind: TokenType, expires: datetime, key: bytes,
          jti: str) -> str:
    claims = {**base, "type": kind, "exp": expires, "jti": jti}
    return jwt.encode(claims, key, algorithm=ALGORITHM)


def _claims(payload: dict[str, Any], kind: TokenType) -> Claims:
    roles = payload["roles"]
    try:
        user_id = UserId(Id(payload["sub"]))
    except (ValueError, TypeError, AttributeError):
        raise Unauthorized("The token names no valid user. Sign in again.") from None
    if not isinstance(roles, list) or not isinstance(payload["username"], str):
        raise Unauthorized("The token's claims are malformed. Sign in again.")
    return Claims(
        user_id=user_id,
        username=payload["username"],
        is_admin="admin" in roles,
        jti=str(payload["jti"]),
        type=kind,
        expires_at=datetime.fromtimestamp(payload["exp"], UTC),
    )


def _signing_key(settings: Settings) -> bytes:
    return hmac.new(settings.secret_key.encode(), _KEY_CONTEXT, hashlib.sha256).digest()


def new_opaque_token(prefix: str) -> tuple[str, str]:
    """A fresh `(token, sha256 hex of the token)`; show the token once, store only the hash.

    `prefix` says what the token is for, e.g. `WORKER_TOKEN_PREFIX` (`shw_`).
    """
    token = prefix + secrets.token_urlsafe(32)
    return token, hash_opaque_token(token)


def hash_opaque_token(token: str) -> str:
    """The SHA-256 hex digest under which an opaque token is stored and looked up."""
    return hashlib.sha256(token.encode()).hexdigest()


def opaque_token_matches(token: str, token_hash: str) -> bool:
    """Whether `token` hashes to `token_hash`, compared in constant time."""
    return hmac.compare_digest(hash_opaque_token(token), token_hash)
