"""Request and response shapes of `/api/v1/auth` and the users it manages: logins, tokens, users and
their limits."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from shoal.api.schemas.base import Strict
from shoal.api.schemas.tasks import DailyBudgetIn


class Login(Strict):
    """`POST /api/v1/auth/login`."""

    username: str = Field(min_length=1, max_length=50)
    password: str = Field(min_length=1, max_length=200)


class Refresh(Strict):
    """`POST /api/v1/auth/refresh`."""

    refresh_token: str = Field(min_length=1, max_length=4096)


class Exchange(Strict):
    """`POST /api/v1/auth/exchange`: trade a one-time login link token for a session."""

    token: str = Field(min_length=1, max_length=256)


class TokenPairOut(BaseModel):
    """Access and refresh tokens."""

    access_token: str
    refresh_token: str
    token_type: str = "bearer"
    expires_in: int


class UserCreate(Strict):
    """`POST /api/v1/users` (admins only)."""

    username: str = Field(min_length=1, max_length=50, pattern=r"^[A-Za-z0-9_.@-]+$")
    password: str = Field(min_length=8, max_length=72)
    email: str | None = Field(None, max_length=255)
    is_admin: bool = False


class UserPublic(BaseModel):
    """A user as the API shows them, with their own limits (None: the server's apply)."""

    user_id: uuid.UUID
    username: str
    email: str | None
    is_admin: bool
    created_at: datetime
    max_active_tasks: int | None = None
    daily_budget: dict[str, Any] | None = None


class UserLimits(Strict):
    """`PATCH /api/v1/users/{id}` (admins only): a user's own limits; null returns a limit
    to the server's setting."""

    max_active_tasks: int | None = Field(None, ge=1, le=10_000)
    daily_budget: DailyBudgetIn | None = None
