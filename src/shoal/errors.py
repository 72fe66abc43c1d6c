"""The one error tree of Shoal.

```
ShoalError                      base; carries `code`, `retryable`, `retry_after`, `details`
├── NotFound                    an id that does not exist (or is not yours)     → 404
├── Conflict                    illegal state change, stale attempt, duplicate → 409
│   └── StaleAttempt            a result from an attempt that lost its lease
├── InvalidInput                a request the domain refuses                    → 422
│   ├── InvalidGraph            cycles, dangling or self dependencies, limits
│   ├── UnstorableText          a NUL, a lone surrogate or a non-finite number
│   ├── UnsafePath              an agent's file name that could escape its folder
│   ├── UnsupportedMedia        an uploaded file of a kind Shoal cannot read    → 415
│   └── PayloadTooLarge         an upload past its limit (per file, per user)   → 413
├── Unauthorized                missing or bad credentials                      → 401
├── Forbidden                   authenticated, but not allowed                  → 403
├── RateLimited                 too many requests                               → 429
├── Unavailable                 e.g. no worker online                           → 503
├── ToolError                   a tool failed on a worker
├── LeaseExpired                an attempt's lease ran out
└── BudgetExceeded              a task ran past its token/cost/time budget
```

Domain code raises these; `api/errors.py` maps them to HTTP responses in one place.
"""

from __future__ import annotations

from typing import Any


class ShoalError(Exception):
    """Base of every error Shoal raises on purpose."""

    code = "shoal_error"
    retryable = False

    def __init__(
        self,
        message: str,
        *,
        details: Any = None,
        retry_after: float | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.details = details
        self.retry_after = retry_after
        if code is not None:
            self.code = code


class NotFound(ShoalError):
    """The thing does not exist, or belongs to somebody else."""

    code = "not_found"


class Conflict(ShoalError):
    """The change is not allowed in the current state."""

    code = "conflict"


class StaleAttempt(Conflict):
    """A result or message from an attempt that no longer holds its lease."""

    code = "stale_attempt"


class InvalidInput(ShoalError):
    """The request is well-formed but the domain refuses it."""

    code = "invalid_input"


class InvalidGraph(InvalidInput):
    """A plan whose dependency graph is not a valid DAG or breaks a limit."""

    code = "invalid_graph"


class UnstorableText(InvalidInput):
    """A value no database can store: text with a NUL character or a lone surrogate, or a
    number that is NaN or infinite. `field` is its dotted path, `reason` says which."""

    code = "unstorable_text"

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}.", details=[
            {"field": field, "message": reason, "type": self.code}])
        self.field = field
        self.reason = reason


class UnsafePath(InvalidInput):
    """A file path that is absolute, climbs out of its folder, or holds bad characters."""

    code = "unsafe_path"


class UnsupportedMedia(InvalidInput):
    """An uploaded file whose content is of no kind Shoal reads (an image, a program, UTF-16
    text); a file that is of a known kind but broken, or named as another, is `InvalidInput`."""

    code = "unsupported_media"


class PayloadTooLarge(InvalidInput):
    """An upload larger than a file may be, or than what its user may still store."""

    code = "payload_too_large"


class Unauthorized(ShoalError):
    """Missing, expired or wrong credentials."""

    code = "unauthorized"


class Forbidden(ShoalError):
    """Authenticated, but this caller may not do this."""

    code = "forbidden"


class RateLimited(ShoalError):
    """Too many requests; `retry_after` says when to try again."""

    code = "rate_limited"
    retryable = True


class Unavailable(ShoalError):
    """A needed resource is not there right now (no worker, database down)."""

    code = "unavailable"
    retryable = True


class ToolError(ShoalError):
    """A tool failed while running an attempt."""

    code = "tool_error"


class LeaseExpired(ShoalError):
    """An attempt's lease ran out before it finished."""

    code = "lease_expired"
    retryable = True


class BudgetExceeded(ShoalError):
    """A task went past its token, cost or wall-time budget."""

    code = "budget_exceeded"
