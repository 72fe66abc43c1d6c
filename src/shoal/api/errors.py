"""The one place Shoal's error tree becomes HTTP: `{error, message, details}` with a status."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import structlog
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from shoal import errors
from shoal.api.schemas.base import ErrorBody

log = structlog.get_logger(__name__)

STATUS: list[tuple[type[errors.ShoalError], int]] = [
    (errors.NotFound, 404),
    (errors.Conflict, 409),
    (errors.UnsupportedMedia, 415),  # before InvalidInput, their base: the first match wins
    (errors.PayloadTooLarge, 413),
    (errors.InvalidInput, 422),
    (errors.Unauthorized, 401),
    (errors.Forbidden, 403),
    (errors.RateLimited, 429),
    (errors.Unavailable, 503),
    (errors.BudgetExceeded, 409),
    (errors.LeaseExpired, 409),
    (errors.ToolError, 502),
]


_DESCRIPTIONS = {
    401: "Missing, expired or invalid access token.",
    403: "Signed in, but not allowed (admins only).",
    404: "No such resource, or not yours.",
    409: "Not allowed in the resource's current state.",
    413: "The request body is too large.",
    415: "The file is of a kind Shoal cannot read; the message lists the kinds it reads.",
    422: "The request is not valid; `details` names each field and why.",
    429: "Too many requests; `Retry-After` says when to try again.",
    503: "Not available right now; `Retry-After` says when to try again.",
}


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI documentation of the error answers a route can give (the `ErrorBody` shape)."""
    return {status: {"model": ErrorBody, "description": _DESCRIPTIONS[status]}
            for status in statuses}


class ErrorResponse(JSONResponse):
    """An error answer in ASCII JSON: whatever an error quotes (a field name the client sent,
    say) escapes safely, so rendering the answer can never fail."""

    def render(self, content: Any) -> bytes:
        """The body as compact ASCII JSON."""
        return json.dumps(content, ensure_ascii=True, separators=(",", ":")).encode()


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
    return ErrorResponse(error_body(exc.code, exc.message, exc.details),
                        status_code=status_for(exc), headers=_headers(exc))


async def _validation_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    details = [{"field": _field(e), "message": _MESSAGES.get(e.get("type"), e.get("msg")),
                "type": e.get("type"), **_passed(e)} for e in exc.errors()]
    if any(d["type"] == "json_invalid" for d in details):
        message = "The request body is not valid JSON."
    else:
        message = "The request is not valid: check " + ", ".join(
            d["field"] for d in details[:5]) + "."
    return ErrorResponse(error_body("validation_error", message, details), status_code=422)


_MESSAGES = {  # clearer words for validation errors whose own message is vague
    "string_unicode": "contains a lone surrogate (such as \\ud800), which is not valid "
                      "Unicode text and cannot be stored",
}


def _passed(error: Mapping[str, Any]) -> dict[str, Any]:
    """What of an error's context a client is told as it is: the names an unknown one may
    have meant (`did_you_mean`)."""
    ctx = error.get("ctx") or {}
    return {"did_you_mean": ctx["did_you_mean"]} if "did_you_mean" in ctx else {}


def _field(error: Mapping[str, Any]) -> str:
    """The dotted name of the field an error is about (`plan.0.description`), with the path
    inside a JSON field when the error names one (`requirements.notes.2`)."""
    parts = [str(p) for p in error.get("loc", ()) if p != "body"]
    inner = (error.get("ctx") or {}).get("inner")
    if inner:
        parts.append(str(inner))
    return ".".join(parts) or "body"


async def _http_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = {404: "not_found", 405: "method_not_allowed", 401: "unauthorized"}.get(
        exc.status_code, "http_error")
    return ErrorResponse(error_body(code, str(exc.detail)), status_code=exc.status_code,
                        headers=getattr(exc, "headers", None))


async def _unexpected(_request: Request, exc: Exception) -> JSONResponse:
    log.exception("api.unexpected_error", error=str(exc))
    return ErrorResponse(
        error_body("internal_error", "Something went wrong on our side; it has been logged."),
        status_code=500,
    )


def install_error_handlers(app: FastAPI) -> None:
    """Map every error to the JSON error shape; never a traceback to the user."""
    app.add_exception_handler(errors.ShoalError, _shoal_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected)
