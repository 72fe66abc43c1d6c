"""What a notification is, where it goes, and how one try to deliver it ends: pure values.

A delivery is `pending` until a try succeeds (`delivered`) or it gives up (`failed`): after a
try that may succeed later (a 5xx, 408, 429, a timeout, a refused connection) it waits for the
next one, as `engine.retry.RetryPolicy` says; after any other answer, or its last try, it fails.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Protocol

from shoal.config import Settings
from shoal.engine.retry import RetryPolicy


class NotificationType(StrEnum):
    """What a notification says; a webhook or an email address subscribes to some of them."""

    TASK_COMPLETED = "task.completed"
    TASK_FAILED = "task.failed"
    TASK_BUDGET_EXCEEDED = "task.budget_exceeded"
    CHECKPOINT_WAITING = "checkpoint.waiting"  # a checkpoint waits for a person's decision
    PING = "ping"  # a test a user asked for (POST …/webhooks/{id}/ping); never subscribed to


SUBSCRIBABLE = tuple(t for t in NotificationType if t is not NotificationType.PING)


class TargetKind(StrEnum):
    """Where a delivery goes."""

    WEBHOOK = "webhook"
    EMAIL = "email"


class DeliveryStatus(StrEnum):
    """Where a delivery is in its life: pending, then delivered or failed for good."""

    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class DueDelivery:
    """A delivery claimed for one try: everything its sender needs."""

    id: uuid.UUID
    kind: TargetKind
    target: str  # the webhook's URL or the email address
    secret: str | None  # the webhook's signing secret
    event_type: NotificationType
    payload: dict[str, Any]
    attempt: int  # this try's number, 1 for the first
    webhook_id: uuid.UUID | None = None


@dataclass(frozen=True, slots=True)
class Outcome:
    """How one try ended: delivered, or not and whether a later try may do better."""

    delivered: bool
    retryable: bool
    status_code: int | None = None  # the HTTP status, or the SMTP reply code
    error: str | None = None

    @classmethod
    def ok(cls, status_code: int | None) -> Outcome:
        """The receiver took it."""
        return cls(delivered=True, retryable=False, status_code=status_code)

    @classmethod
    def retry(cls, error: str, status_code: int | None = None) -> Outcome:
        """Not delivered this time; a later try may be."""
        return cls(delivered=False, retryable=True, status_code=status_code, error=error)

    @classmethod
    def give_up(cls, error: str, status_code: int | None = None) -> Outcome:
        """Not delivered, and trying again would not help."""
        return cls(delivered=False, retryable=False, status_code=status_code, error=error)


class Sender(Protocol):
    """Delivers to one kind of target (`TargetKind`)."""

    async def send(self, delivery: DueDelivery) -> Outcome:
        """Try once; never raises for the receiver's failures (they are the `Outcome`)."""
        ...


@dataclass(frozen=True, slots=True)
class Settled:
    """A delivery's state after a try."""

    status: DeliveryStatus
    next_attempt_at: datetime
    delivered_at: datetime | None


def retry_policy(settings: Settings) -> RetryPolicy:
    """Exponential backoff with jitter from the `notify_*` settings."""
    waits = tuple(settings.notify_retry_base * settings.notify_retry_factor ** n
                  for n in range(max(1, settings.notify_max_attempts - 1)))
    return RetryPolicy(max_attempts=settings.notify_max_attempts, delays=waits,
                       jitter=settings.notify_retry_jitter)


def settle(outcome: Outcome, *, attempt: int, policy: RetryPolicy, now: datetime,
           rand: float) -> Settled:
    """Where a pending delivery goes after try number `attempt` ended with `outcome`."""
    if outcome.delivered:
        return Settled(DeliveryStatus.DELIVERED, now, now)
    if outcome.retryable and policy.should_retry(attempt):
        wait = timedelta(seconds=policy.delay(attempt, rand=rand))
        return Settled(DeliveryStatus.PENDING, now + wait, None)
    return Settled(DeliveryStatus.FAILED, now, None)

