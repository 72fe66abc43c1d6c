"""Every Redis key and channel name Shoal uses, in one place.

All names start with the deployment's namespace (`redis_namespace`, `shoal` unless set), so
several deployments (or test runs) can share one Redis without hearing each other, and
`redis-cli --scan --pattern 'shoal:*'` shows everything a deployment owns.
"""

from __future__ import annotations

NAMESPACE = "shoal"
"""The default namespace."""

PREFIX = f"{NAMESPACE}:"
"""Start of every key and channel name in the default namespace."""

EVENTS_CHANNEL = f"{PREFIX}events"
"""Pub/sub channel carrying committed events between control-plane copies."""


def events_channel(namespace: str = NAMESPACE) -> str:
    """The pub/sub channel carrying committed events between a deployment's copies."""
    return f"{namespace}:events"


def task_events_channel(events_channel: str, task_id: object) -> str:
    """The pub/sub channel carrying one task's events, named after the deployment's (ADR 0043)."""
    return f"{events_channel}:task:{task_id}"


def rate_limit_key(key: str, namespace: str = NAMESPACE) -> str:
    """The counter key for one rate-limited caller (an IP, a user, a login name)."""
    return f"{namespace}:ratelimit:{key}"


def command_inbox(namespace: str, copy_name: str) -> str:
    """The list of people's commands forwarded to one copy (ADR 0038)."""
    return f"{namespace}:commands:{copy_name}"


def command_answers(namespace: str, request: str) -> str:
    """The list one forwarded command's answer arrives on."""
    return f"{namespace}:answers:{request}"


def fleet(namespace: str) -> str:
    """The hash of every connected worker's card, by worker id (ADR 0039)."""
    return f"{namespace}:fleet"


def relay_inbox(namespace: str, copy_name: str) -> str:
    """The list of frames other copies relay to one copy (ADR 0039)."""
    return f"{namespace}:relay:{copy_name}"
