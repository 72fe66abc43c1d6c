"""Sign-in: password login, token refresh, one-time login links, and user accounts."""

from __future__ import annotations

import functools
import uuid
from datetime import datetime
from typing import Any

import structlog
from fastapi import APIRouter, Request

from shoal.api.deps import ServicesDep, UserDep
from shoal.api.errors import error_responses
from shoal.api.schemas.auth import (
    Exchange,
    Login,
    Refresh,
    TokenPairOut,
    UserCreate,
    UserLimits,
    UserPublic,
)
from shoal.auth.passwords import hash_password, hash_password_async, verify_password_async
from shoal.auth.tokens import TokenPair, decode_token, hash_opaque_token, issue_token_pair
from shoal.errors import Forbidden, NotFound, Unauthorized
from shoal.ids import parse_id
from shoal.store import accounts, usage
from shoal.store.models import utcnow

log = structlog.get_logger(__name__)
router = APIRouter(prefix="/api/v1", tags=["auth"],
                   responses=error_responses(401, 403, 404, 409, 413, 422, 429))


@functools.lru_cache(maxsize=4)
def _dummy_hash(rounds: int) -> str:
    """A real hash to check against when the user does not exist, so timing does not tell."""
    return hash_password("not-a-real-password", rounds=rounds)


@router.post("/auth/login", response_model=TokenPairOut)
async def login(body: Login, request: Request, services: ServicesDep) -> TokenPairOut:
    """Trade a username and password for access and refresh tokens.

    Limited per client address and per username (whatever the address): every attempt
    counts, right or wrong, before the password is checked, so that a guesser past the limit
    learns nothing more and costs no more bcrypt time; a person signs in far less often."""
    settings = services.settings
    client = request.client.host if request.client else "unknown"
    await services.limiter.hit(f"login:{client}",
                               limit=settings.login_rate_limit_per_minute, window=60)
    await services.limiter.hit(f"login-account:{body.username}",
                               limit=settings.login_account_rate_limit_per_minute, window=60)
    async with services.db.connection() as conn:
        row = await accounts.user_by_name(conn, body.username)
    stored = row.password_hash if row else _dummy_hash(settings.bcrypt_rounds)
    ok = await verify_password_async(body.password, stored)
    if row is None or not ok:
        raise Unauthorized("Wrong username or password.", code="invalid_credentials")
    pair = _issue(row, services)
    now = utcnow()
    async with services.db.begin() as conn:
        await _start_family(conn, row.id, pair, now)
        await accounts.touch_login(conn, row.id, now)
    return _out(pair)


@router.post("/auth/refresh", response_model=TokenPairOut)
async def refresh(body: Refresh, services: ServicesDep) -> TokenPairOut:
    """Trade a refresh token for a new pair. Each refresh token works once: the answer's
    replaces it. One sent again ends its sign-in: every refresh token descending from the
    same sign-in stops working, so whoever holds one must sign in again."""
    claims = decode_token(body.refresh_token, settings=services.settings,
                          expected_type="refresh")
    async with services.db.connection() as conn:
        row = await accounts.user_by_id(conn, claims.user_id)
    if row is None:
        raise Unauthorized("This account no longer exists.")
    pair = _issue(row, services)
    assert pair.refresh_expires_at is not None
    async with services.db.begin() as conn:
        outcome = await accounts.rotate_refresh_token(
            conn, jti=claims.jti, user_id=claims.user_id, next_jti=pair.refresh_jti,
            next_expires_at=pair.refresh_expires_at, now=utcnow())
    # Refused only now, once the transaction (with a reuse's revocation) is committed.
    if outcome is not accounts.Refreshed.ROTATED:
        if outcome is accounts.Refreshed.REUSED:
            log.warning("auth.refresh_token_reused", user_id=str(claims.user_id))
        message, code = _REFUSED[outcome]
        raise Unauthorized(message, code=code)
    return _out(pair)


_REFUSED = {
    accounts.Refreshed.REUSED: (
        "This refresh token was used already, so it may have been copied: every session of "
        "this sign-in is now ended. Sign in again.", "refresh_token_reused"),
    accounts.Refreshed.REVOKED: (
        "This sign-in was ended (one of its refresh tokens was used twice). Sign in again.",
        "refresh_token_revoked"),
    accounts.Refreshed.UNKNOWN: (
        "This refresh token is not known here (issued before an upgrade, or its sign-in "
        "ended). Sign in again.", "refresh_token_unknown"),
    accounts.Refreshed.EXPIRED: ("Your refresh token has expired. Sign in again.",
                                 "token_expired"),
}


@router.post("/auth/exchange", response_model=TokenPairOut)
async def exchange(body: Exchange, services: ServicesDep) -> TokenPairOut:
    """Trade a one-time login-link token (printed by `shoal up`) for a session."""
    now = utcnow()
    async with services.db.begin() as conn:
        token = await accounts.live_token(conn, kind="login",
                                          token_hash=hash_opaque_token(body.token), now=now)
        # The revocation is conditional: of two exchanges of one link at once, one wins.
        if (token is None or token.user_id is None
                or not await accounts.revoke_token(conn, token.id, now)):
            raise Unauthorized("This login link is invalid, used or expired. "
                               "Run `shoal up` again or sign in with a password.")
        row = await accounts.user_by_id(conn, token.user_id)
        if row is None:
            raise Unauthorized("This account no longer exists.")
        pair = _issue(row, services)
        await _start_family(conn, row.id, pair, now)
    return _out(pair)


@router.get("/users/me", response_model=UserPublic)
async def me(user: UserDep, services: ServicesDep) -> UserPublic:
    """The signed-in user."""
    async with services.db.connection() as conn:
        row = await accounts.user_by_id(conn, user.user_id)
    if row is None:
        raise NotFound("This account no longer exists.")
    return _public(row)


@router.post("/users", status_code=201, response_model=UserPublic)
async def create_user(body: UserCreate, user: UserDep, services: ServicesDep) -> UserPublic:
    """Create an account (admins only)."""
    if not user.is_admin:
        raise Forbidden("Only an admin can create users.")
    hashed = await hash_password_async(body.password, rounds=services.settings.bcrypt_rounds)
    async with services.db.begin() as conn:
        user_id = await accounts.create_user(conn, username=body.username,
                                             password_hash=hashed, is_admin=body.is_admin,
                                             email=body.email, now=utcnow())
        row = await accounts.user_by_id(conn, user_id)
    assert row is not None
    return _public(row)


@router.patch("/users/{user_id}", response_model=UserPublic)
async def set_user_limits(user_id: str, body: UserLimits, user: UserDep,
                          services: ServicesDep) -> UserPublic:
    """Set a user's own limits: active tasks at once and daily budget (admins only; a
    field sent as null returns to the server's setting, a field left out is unchanged)."""
    if not user.is_admin:
        raise Forbidden("Only an admin can change a user's limits.")
    uid = parse_id(user_id, kind="user")
    changes = body.model_dump(include=body.model_fields_set, exclude_none=False)
    if isinstance(changes.get("daily_budget"), dict):
        changes["daily_budget"] = {k: v for k, v in changes["daily_budget"].items()
                                   if v is not None} or None
    async with services.db.begin() as conn:
        if changes and not await usage.set_limits(conn, uid, changes):
            raise NotFound(f"No user {user_id}.")
        row = await accounts.user_by_id(conn, uid)
    if row is None:
        raise NotFound(f"No user {user_id}.")
    return _public(row)


def _issue(row: Any, services: ServicesDep) -> TokenPair:
    return issue_token_pair(row.id, username=row.username, is_admin=row.is_admin,
                            settings=services.settings)


async def _start_family(conn: Any, user_id: uuid.UUID, pair: TokenPair,
                        now: datetime) -> None:
    """A sign-in: its refresh token starts a family of its own."""
    assert pair.refresh_expires_at is not None
    await accounts.start_refresh_family(conn, user_id=user_id, jti=pair.refresh_jti,
                                        expires_at=pair.refresh_expires_at, now=now)


def _out(pair: TokenPair) -> TokenPairOut:
    return TokenPairOut(access_token=pair.access_token, refresh_token=pair.refresh_token,
                        token_type=pair.token_type, expires_in=pair.expires_in)


def _public(row: object) -> UserPublic:
    r = row
    return UserPublic(user_id=r.id, username=r.username, email=r.email,  # type: ignore[attr-defined]
                      is_admin=r.is_admin, created_at=r.created_at,  # type: ignore[attr-defined]
                      max_active_tasks=r.max_active_tasks,  # type: ignore[attr-defined]
                      daily_budget=r.daily_budget)  # type: ignore[attr-defined]
