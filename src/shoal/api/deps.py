"""Request dependencies: the services of this app and the signed-in user."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.requests import HTTPConnection

from shoal.api.reporting import PdfRenderer
from shoal.artifacts.store import ArtifactStore
from shoal.auth.ratelimit import RateLimiter
from shoal.auth.tokens import Claims, decode_token
from shoal.bus.base import EventBus
from shoal.config import Settings
from shoal.errors import NotFound, Unauthorized
from shoal.limits import text_problem
from shoal.runtime.core import Runtime
from shoal.store.db import Database
from shoal.workflows import Catalog


@dataclass(slots=True)
class Services:
    """Everything a request handler may use, built once per app."""

    settings: Settings
    db: Database
    bus: EventBus
    artifacts: ArtifactStore
    runtime: Runtime
    limiter: RateLimiter
    workflows: Catalog
    pdf: PdfRenderer


async def get_services(request: Request) -> Services:
    """The app's services. (A coroutine: FastAPI runs a plain function dependency on a worker
    thread, a hop there and back for every request.)"""
    services: Services = request.app.state.services
    return services


def bearer_token(request: HTTPConnection) -> str | None:
    """The token from `Authorization: Bearer …` of a request or socket, if any."""
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


# Declares the bearer scheme in the OpenAPI document; the header itself is read below, so
# that every failure answers in Shoal's error shape.
_BEARER = HTTPBearer(auto_error=False, scheme_name="bearer",
                     description="An access token from POST /api/v1/auth/login.")


async def current_user(
    request: Request, services: Annotated[Services, Depends(get_services)],
    _scheme: Annotated[HTTPAuthorizationCredentials | None, Security(_BEARER)],
) -> Claims:
    """The person behind the request's access token; 401 without a valid one."""
    token = bearer_token(request)
    if token is None:
        raise Unauthorized("Sign in first: send 'Authorization: Bearer <access token>' "
                           "(POST /api/v1/auth/login gives you one).")
    claims = decode_token(token, settings=services.settings, expected_type="access")
    await services.limiter.hit(f"user:{claims.user_id}",
                               limit=services.settings.rate_limit_per_minute, window=60)
    return claims


MAX_PATH_PARAMETER = 1024  # characters: ids and names are far shorter, a file's path too


async def checked_path(connection: HTTPConnection) -> None:
    """Every route's path parameters are text the store can look up, checked before the route
    runs (an app-wide dependency, so a route added later is covered): an id that could not be
    one is simply not found (404, like any unknown id); other text is 422 naming the
    parameter."""
    for name, value in connection.path_params.items():
        if not isinstance(value, str):
            continue
        problem = text_problem(value)
        if problem is None and len(value) > MAX_PATH_PARAMETER:
            problem = f"is {len(value)} characters long; at most {MAX_PATH_PARAMETER} are allowed"
        if problem is None:
            continue
        if name.endswith("_id"):
            raise NotFound(f"No {name.removesuffix('_id')} with that id.")
        raise RequestValidationError([{"loc": ("path", name), "msg": problem,
                                       "type": "value_error"}])


ServicesDep = Annotated[Services, Depends(get_services)]
UserDep = Annotated[Claims, Depends(current_user)]
