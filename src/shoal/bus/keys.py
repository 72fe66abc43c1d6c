"""Every Redis key and channel name Shoal uses, in one place.

All names start with `shoal:` so a Redis shared with other programs stays readable, and so
`redis-cli --scan --pattern 'shoal:*'` shows everything Shoal owns.
"""

from __future__ import annotations

PREFIX = "shoal:"
"""Start of every Shoal key and channel name."""

EVENTS_CHANNEL = f"{PREFIX}events"
"""Pub/sub channel carrying committed events between control-plane copies."""

RATE_LIMIT_PREFIX = f"{PREFIX}ratelimit:"
"""Prefix of the fixed-window rate-limit counters."""


def rate_limit_key(key: str) -> str:
    """The counter key for one rate-limited caller (an IP, a user, a login name)."""
    return f"{RATE_LIMIT_PREFIX}{key}"
