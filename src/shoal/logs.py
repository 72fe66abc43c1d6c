"""Logging set-up: structlog to stderr, level from `SHOAL_LOG_LEVEL`, secrets never logged."""

from __future__ import annotations

import logging
import os
import sys

import structlog


def configure_logging(default_level: str = "info") -> None:
    """Route structlog and stdlib logging to stderr at one level."""
    name = os.environ.get("SHOAL_LOG_LEVEL", default_level).upper()
    level = logging.getLevelNamesMapping().get(name, logging.INFO)
    logging.basicConfig(level=level, stream=sys.stderr, format="%(message)s")
    for noisy in ("uvicorn.access", "httpx", "httpcore", "websockets"):
        logging.getLogger(noisy).setLevel(max(level, logging.WARNING))
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty()),
        ],
        # Module-level loggers are lazy proxies that otherwise rebuild their bound logger on
        # every call (nine Python calls, even for a line below the level): a worker logs two
        # lines per attempt.
        cache_logger_on_first_use=True,
    )
