"""The small built-in status page (the full dashboard comes later)."""

from __future__ import annotations

import functools
from importlib import resources


@functools.cache
def index_html() -> str:
    """The status page; it signs in from a one-time login link."""
    return resources.files("shoal.web").joinpath("index.html").read_text(encoding="utf-8")
