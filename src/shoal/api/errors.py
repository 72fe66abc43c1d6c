"""The one place Shoal's error tree becomes HTTP: `{error, message, details}` with a status."""

from __future__ import annotations

from typing import Any

import structlog
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from shoal import errors

log = structlog.get_logger(__name__)

STATUS: list[tuple[type[errors.ShoalError], int]] = [
    (errors.NotFound, 404),
    (errors.Conflict, 409),
    (errors.InvalidInput, 422),
    (errors.Unauthorized, 401),
    (errors.Forbidden, 403),
    (errors.RateLimited, 429),
    (errors.Unavailable, 503),
    (errors.BudgetExceeded, 409),
    (errors.LeaseExpired, 409),
    (errors.ToolError, 502),
]


def error_body(error: str, message: str, details: Any = None) -> dict[str, Any]:
    """The error shape every endpoint answers with."""
    return {"error": error, "message": message, "details": details}


def status_for(exc: errors.ShoalError) -> int:
    """The HTTP status of a domain error."""
    for cls, status in STATUS:
        if isinstance(exc, cls):
            return status
    return 500


def _headers(exc: errors.ShoalError) -> dict[str, str]:
    headers = {}
    if exc.retry_after is not None:
        headers["Retry-After"] = str(max(1, round(exc.retry_after)))
    if isinstance(exc, errors.Unauthorized):
        headers["WWW-Authenticate"] = "Bearer"
    return headers


async def _shoal_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, errors.ShoalError)
    return JSONResponse(error_body(exc.code, exc.message, exc.details),
                        status_code=status_for(exc), headers=_headers(exc))


async def _validation_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    details = [
        {"field": ".".join(str(p) for p in e.get("loc", ()) if p != "body") or "body",
         "message": e.get("msg", "invalid"), "type": e.get("type")}
        for e in exc.errors()
    ]
    if any(d["type"] == "json_invalid" for d in details):
        message = "The request body is not valid JSON."
    else:
        message = "The request is not valid: check " + ", ".join(
            d["field"] for d in details[:5]) + "."
    return JSONResponse(error_body("validation_error", message, details), status_code=422)


async def _http_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = {404: "not_found", 405: "method_not_allowed", 401: "unauthorized"}.get(
        exc.status_code, "http_error")
    return JSONResponse(error_body(code, str(exc.detail)), status_code=exc.status_code,
                        headers=getattr(exc, "headers", None))


async def _unexpected(_request: Request, exc: Exception) -> JSONResponse:
    log.exception("api.unexpected_error", error=str(exc))
    return JSONResponse(
        error_body("internal_error", "Something went wrong on our side; it has been logged."),
        status_code=500,
    )


def install_error_handlers(app: FastAPI) -> None:
    """Map every error to the JSON error shape; never a traceback to the user."""
    app.add_exception_handler(errors.ShoalError, _shoal_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected)
