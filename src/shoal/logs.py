"""Logging set-up: structlog to stderr, level from `SHOAL_LOG_LEVEL`, secrets never logged.

Secrets are kept out in two ways. First, nothing logs them on purpose: tracebacks are plain
(no local variables), SQL parameters are hidden by the engines, and uvicorn's own log
configuration is not installed. Second, as a line of defence for what slips through (a URL
with `?token=`, an exception message quoting a connection string), every line, structlog's
and the standard library's alike, passes through `redact` just before it is written: it masks
the shapes of the secrets Shoal handles — JWTs, `shw_`/`shl_` tokens, vendor API keys,
passwords in URLs and `token=` query values — and the values of fields named like secrets.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import MutableMapping
from typing import Any

import structlog

MASK = "[redacted]"
# Each shape of secret, its replacement, the pieces of text it cannot match without one of
# (none: no such piece), and the same for its case-insensitive words, as they read in a line
# lowercased. `redact` skips a shape whose pieces are all absent from the line as it stands by
# then, which changes nothing: such a pattern finds no match. The lowercased pieces are looked
# for only in a line of ASCII, where lowercasing is exactly the patterns' `(?i)` (elsewhere a
# character such as U+017F, the long s, or U+212A, the Kelvin sign, matches `s` or `k` under
# `(?i)` without lowercasing to it): then the pattern runs. Running all seven on an ordinary
# line took some 11 µs of a line's 57, and the two whose pieces a plain `key=value` line holds
# (`=`, and none) 12 of its 29 (a worker writes one an attempt at the default level).
_SECRET_SHAPES: tuple[tuple[re.Pattern[str], str, tuple[str, ...], tuple[str, ...]], ...] = (
    # A JWT: three base64url parts, the first two JSON objects (`{"` encodes as `eyJ`).
    (re.compile(r"eyJ[A-Za-z0-9_-]{4,}\.eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*"), MASK, ("eyJ",),
     ()),
    # Shoal's opaque tokens (worker tokens, one-time login links, share links).
    (re.compile(r"\bsh[wls]_[A-Za-z0-9_-]{8,}"), MASK, ("shw_", "shl_", "shs_"), ()),
    # Vendor API keys: OpenAI and Anthropic (`sk-…`, `sk-ant-…`), Google (`AIza…`).
    (re.compile(r"\bsk-[A-Za-z0-9_-]{8,}"), MASK, ("sk-",), ()),
    (re.compile(r"\bAIza[0-9A-Za-z_-]{20,}"), MASK, ("AIza",), ()),
    # A password inside a URL: scheme://user:password@host.
    (re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s:/@]*):[^\s@/]+@"), rf"\1:{MASK}@",
     ("://",), ()),
    # Credentials in a query string or a header-like `key=value` (`access_token=` and
    # `refresh_token=` hold `token=`; `api_key=`, `apikey=` and `secret_key=` hold `key=`).
    (re.compile(r"(?i)((?:^|[?&;,\s])(?:access_token|refresh_token|token|api_key|apikey|password"
                r"|secret|secret_key)=)[^&\s\"']+"), rf"\1{MASK}", ("=",),
     ("token=", "key=", "password=", "secret=")),
    (re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}"), rf"\1 {MASK}", (),
     ("bearer", "basic")),
)
# Field names whose values are secrets: `password`, `worker_token`, `secret_key`, `api_key`…
# (not `input_tokens`: a name must end in one of these words).
_SECRET_FIELD = re.compile(r"(?i)(?:^|_)(password|passwd|secret|secret_key|token|api_key"
                           r"|apikey|authorization|cookie)$")


def redact(text: str) -> str:
    """`text` with every known shape of secret masked."""
    folded = text.lower() if text.isascii() else None  # None: run the case-insensitive ones
    for pattern, replacement, needs, words in _SECRET_SHAPES:
        # Loops, not `any(…)`: a generator for each of seven shapes was most of a line's cost.
        for piece in needs:
            if piece in text:
                break
        else:
            if needs:
                continue
        if words and folded is not None:
            for word in words:
                if word in folded:
                    break
            else:
                continue
        masked = pattern.sub(replacement, text)
        if masked is not text:  # (`sub` gives back the same string when nothing matched)
            text = masked
            folded = text.lower() if text.isascii() else None
    return text


def _mask_secret_fields(
    _logger: Any, _name: str, event: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """A structlog processor: the value of any field named like a secret is masked."""
    for key in event:
        if key != "event" and _SECRET_FIELD.search(key):
            event[key] = MASK
    return event


def _redact_line(_logger: Any, _name: str, line: Any) -> str:
    """A structlog processor after the renderer: the whole rendered line, redacted."""
    return redact(str(line))


class RedactingFormatter(logging.Formatter):
    """A standard-library formatter whose every line, traceback included, is redacted."""

    def format(self, record: logging.LogRecord) -> str:
        """The record formatted as usual, then redacted."""
        return redact(super().format(record))


def configure_logging(default_level: str = "info", *, access_log: bool = False) -> None:
    """Route structlog and stdlib logging to stderr at one level, redacted.

    `access_log` keeps uvicorn's per-request lines (at the chosen level); otherwise they are
    shown only from `warning` up.
    """
    name = os.environ.get("SHOAL_LOG_LEVEL", default_level).upper()
    level = logging.getLevelNamesMapping().get(name, logging.INFO)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(RedactingFormatter("%(message)s"))
    logging.basicConfig(level=level, handlers=[handler], force=True)
    quiet = ["httpx", "httpcore", "websockets", "alembic"]
    if not access_log:
        quiet.append("uvicorn.access")
    for noisy in quiet:
        logging.getLogger(noisy).setLevel(max(level, logging.WARNING))
    for own in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(own).handlers.clear()  # uvicorn's own handlers bypass the redaction
        logging.getLogger(own).propagate = True
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        processors=[
            _mask_secret_fields,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            # Plain tracebacks: the rich renderer's default shows every frame's local
            # variables, which is how passwords and keys once reached the log.
            structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty(),
                                          exception_formatter=structlog.dev.plain_traceback),
            _redact_line,
        ],
        # Module-level loggers are lazy proxies that otherwise rebuild their bound logger on
        # every call (nine Python calls, even for a line below the level): a worker logs two
        # lines per attempt.
        cache_logger_on_first_use=True,
    )
