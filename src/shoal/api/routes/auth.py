"""Sign-in: password login, token refresh, one-time login links, and user accounts."""

from __future__ import annotations

import functools

from fastapi import APIRouter, Request

from shoal.api.deps import ServicesDep, UserDep
from shoal.api.errors import error_responses
from shoal.api.schemas import (
    Exchange,
    Login,
    Refresh,
    TokenPairOut,
    UserCreate,
    UserLimits,
    UserPublic,
)
from shoal.auth.passwords import hash_password, hash_password_async, verify_password_async
from shoal.auth.tokens import decode_token, hash_opaque_token, issue_token_pair
from shoal.errors import Forbidden, NotFound, Unauthorized
from shoal.ids import parse_id
from shoal.store import accounts, usage
from shoal.store.models import utcnow

router = APIRouter(prefix="/api/v1", tags=["auth"],
                   responses=error_responses(401, 403, 404, 409, 413, 422, 429))


@functools.lru_cache(maxsize=4)
def _dummy_hash(rounds: int) -> str:
    """A real hash to check against when the user does not exist, so timing does not tell."""
    return hash_password("not-a-real-password", rounds=rounds)


@router.post("/auth/login", response_model=TokenPairOut)
async def login(body: Login, request: Request, services: ServicesDep) -> TokenPairOut:
    """Trade a username and password for access and refresh tokens."""
    client = request.client.host if request.client else "unknown"
    await services.limiter.hit(f"login:{client}",
                               limit=services.settings.login_rate_limit_per_minute, window=60)
    async with services.db.connection() as conn:
        row = await accounts.user_by_name(conn, body.username)
    stored = row.password_hash if row else _dummy_hash(services.settings.bcrypt_rounds)
    ok = await verify_password_async(body.password, stored)
    if row is None or not ok:
        raise Unauthorized("Wrong username or password.", code="invalid_credentials")
    async with services.db.begin() as conn:
        await accounts.touch_login(conn, row.id, utcnow())
    return _pair(row, services)


@router.post("/auth/refresh", response_model=TokenPairOut)
async def refresh(body: Refresh, services: ServicesDep) -> TokenPairOut:
    """Trade a refresh token for a new pair."""
    claims = decode_token(body.refresh_token, settings=services.settings,
                          expected_type="refresh")
    async with services.db.connection() as conn:
        row = await accounts.user_by_id(conn, claims.user_id)
    if row is None:
        raise Unauthorized("This account no longer exists.")
    return _pair(row, services)


@router.post("/auth/exchange", response_model=TokenPairOut)
async def exchange(body: Exchange, services: ServicesDep) -> TokenPairOut:
    """Trade a one-time login-link token (printed by `shoal up`) for a session."""
    now = utcnow()
    async with services.db.begin() as conn:
        token = await accounts.live_token(conn, kind="login",
                                          token_hash=hash_opaque_token(body.token), now=now)
        if token is None or token.user_id is None:
            raise Unauthorized("This login link is invalid, used or expired. "
                               "Run `shoal up` again or sign in with a password.")
        await accounts.revoke_token(conn, token.id, now)
        row = await accounts.user_by_id(conn, token.user_id)
    if row is None:
        raise Unauthorized("This account no longer exists.")
    return _pair(row, services)


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


def _pair(row: object, services: ServicesDep) -> TokenPairOut:
    pair = issue_token_pair(row.id, username=row.username,  # type: ignore[attr-defined]
                            is_admin=row.is_admin,  # type: ignore[attr-defined]
                            settings=services.settings)
    return TokenPairOut(access_token=pair.access_token, refresh_token=pair.refresh_token,
                        token_type=pair.token_type, expires_in=pair.expires_in)


def _public(row: object) -> UserPublic:
    r = row
    return UserPublic(user_id=r.id, username=r.username, email=r.email,  # type: ignore[attr-defined]
                      is_admin=r.is_admin, created_at=r.created_at,  # type: ignore[attr-defined]
                      max_active_tasks=r.max_active_tasks,  # type: ignore[attr-defined]
                      daily_budget=r.daily_budget)  # type: ignore[attr-defined]
