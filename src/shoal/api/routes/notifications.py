"""Notifications: your webhooks, your email address, and how the latest deliveries went.

A webhook's secret is write-only: it signs every delivery (docs/guides/notifications.md) and is
never shown again after you send it.
"""

from __future__ import annotations

import re
import uuid
from datetime import datetime
from typing import Annotated, Any, Literal

import sqlalchemy as sa
from fastapi import APIRouter, Query, Response
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, Field, field_validator

from shoal.api.deps import ServicesDep, UserDep
from shoal.api.errors import error_responses
from shoal.api.schemas.base import Strict
from shoal.errors import Conflict, NotFound
from shoal.ids import parse_id
from shoal.notify import outbox, targets
from shoal.notify.delivery import DeliveryStatus, NotificationType
from shoal.notify.webhooks import url_problem
from shoal.store.models import utcnow

router = APIRouter(prefix="/api/v1/notifications", tags=["notifications"],
                   responses=error_responses(401, 404, 413, 422, 429))

Subscribable = Literal["task.completed", "task.failed", "task.budget_exceeded",
                       "checkpoint.waiting"]
_ALL: list[Subscribable] = ["task.completed", "task.failed", "task.budget_exceeded",
                            "checkpoint.waiting"]
_EVENTS = ("Which notifications to send: any of task.completed, task.failed, "
           "task.budget_exceeded, checkpoint.waiting (default: all).")
_ADDRESS = re.compile(r"^[^@\s<>(),;:\"\[\]\\]{1,64}@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+$")


def _distinct(values: list[Subscribable] | None) -> list[Subscribable] | None:
    return None if values is None else list(dict.fromkeys(values))


class WebhookCreate(Strict):
    """`POST /api/v1/notifications/webhooks`."""

    url: str = Field(min_length=1, max_length=2048, description=(
        "An https:// URL (a server in dev mode also takes http://127.0.0.1 and localhost)."))
    secret: str = Field(min_length=16, max_length=255, description=(
        "Signs every delivery (HMAC-SHA256); at least 16 characters, never shown again."))
    events: list[Subscribable] = Field(default_factory=lambda: list(_ALL), min_length=1,
                                       max_length=10, description=_EVENTS)

    @field_validator("url")
    @classmethod
    def _url_shape(cls, value: str) -> str:
        problem = url_problem(value, dev=True, allow_private=True)  # the mode's rules: later
        if problem is not None:
            raise ValueError(f"url {problem}")
        return value

    _events = field_validator("events")(_distinct)


class WebhookChange(Strict):
    """`PATCH /api/v1/notifications/webhooks/{id}`: what to change."""

    events: list[Subscribable] | None = Field(None, min_length=1, max_length=10,
                                              description=_EVENTS)
    enabled: bool | None = Field(None, description=(
        "false switches the webhook off (its pending deliveries fail); true, on again."))

    _events = field_validator("events")(_distinct)


class WebhookPublic(BaseModel):
    """A webhook of yours, without its secret."""

    id: uuid.UUID
    url: str
    events: list[str]
    enabled: bool
    created_at: datetime


class WebhookList(BaseModel):
    """Your webhooks, oldest first."""

    webhooks: list[WebhookPublic]


class EmailChange(Strict):
    """`PUT /api/v1/notifications/email`."""

    address: str = Field(max_length=254)
    events: list[Subscribable] = Field(default_factory=lambda: list(_ALL), min_length=1,
                                       max_length=10, description=_EVENTS)

    @field_validator("address")
    @classmethod
    def _address_shape(cls, value: str) -> str:
        if not _ADDRESS.match(value):
            raise ValueError("address must be an email address such as ada@example.com")
        return value

    _events = field_validator("events")(_distinct)


class EmailPublic(BaseModel):
    """Where your email notifications go (`address` null: nowhere)."""

    address: str | None
    events: list[str]
    updated_at: datetime | None = None


class DeliveryPublic(BaseModel):
    """One notification to one target and how trying to deliver it went."""

    id: uuid.UUID
    kind: str
    webhook_id: uuid.UUID | None
    target: str
    type: str
    task_id: uuid.UUID | None
    status: str
    attempts: int
    last_status_code: int | None
    last_error: str | None
    created_at: datetime
    last_attempt_at: datetime | None
    next_attempt_at: datetime | None  # only while pending
    delivered_at: datetime | None


class DeliveryList(BaseModel):
    """Your latest deliveries, newest first."""

    deliveries: list[DeliveryPublic]


class PingQueued(BaseModel):
    """A test ping on its way."""

    delivery_id: uuid.UUID
    message: str


@router.get("/webhooks", response_model=WebhookList)
async def list_webhooks(user: UserDep, services: ServicesDep) -> WebhookList:
    """Your webhooks (their secrets are never shown)."""
    async with services.db.connection() as conn:
        rows = await targets.list_webhooks(conn, user.user_id)
    return WebhookList(webhooks=[_webhook(r) for r in rows])


@router.post("/webhooks", status_code=201, response_model=WebhookPublic,
             responses=error_responses(409))
async def add_webhook(body: WebhookCreate, user: UserDep,
                      services: ServicesDep) -> WebhookPublic:
    """Register a webhook: Shoal POSTs the notifications you pick to it, signed with your
    secret (docs/guides/notifications.md says how to check the signature)."""
    s = services.settings
    problem = url_problem(body.url, dev=s.mode == "dev", allow_private=s.webhook_allow_private)
    if problem is not None:
        raise RequestValidationError([{"loc": ("body", "url"), "msg": f"url {problem}",
                                       "type": "value_error"}])
    async with services.db.begin() as conn:
        row = await targets.add_webhook(
            conn, user_id=user.user_id, url=body.url, secret=body.secret,
            events=[NotificationType(e) for e in body.events], now=utcnow(),
            limit=s.notify_max_webhooks)
    return _webhook(row)


@router.patch("/webhooks/{webhook_id}", response_model=WebhookPublic)
async def change_webhook(webhook_id: str, body: WebhookChange, user: UserDep,
                         services: ServicesDep) -> WebhookPublic:
    """Change which notifications a webhook gets, or switch it off or on."""
    async with services.db.begin() as conn:
        row = await targets.change_webhook(
            conn, user_id=user.user_id, webhook_id=parse_id(webhook_id, kind="webhook"),
            events=None if body.events is None else [NotificationType(e) for e in body.events],
            enabled=body.enabled, now=utcnow())
    return _webhook(row)


@router.delete("/webhooks/{webhook_id}", status_code=204)
async def delete_webhook(webhook_id: str, user: UserDep, services: ServicesDep) -> Response:
    """Delete a webhook and its deliveries."""
    async with services.db.begin() as conn:
        await targets.remove_webhook(conn, user.user_id, parse_id(webhook_id, kind="webhook"))
    return Response(status_code=204)


@router.post("/webhooks/{webhook_id}/ping", status_code=202, response_model=PingQueued,
             responses=error_responses(409))
async def ping_webhook(webhook_id: str, user: UserDep, services: ServicesDep) -> PingQueued:
    """Send a test notification (`type: ping`) to a webhook; GET …/deliveries shows how it
    went."""
    async with services.db.begin() as conn:
        row = await targets.webhook_of(conn, user.user_id, parse_id(webhook_id, kind="webhook"))
        if row.disabled_at is not None:
            raise Conflict("The webhook is switched off; switch it on first (PATCH with "
                           '{"enabled": true}).', code="webhook_disabled")
        delivery_id = await outbox.add_ping(conn, user_id=user.user_id, webhook=row,
                                            now=utcnow())
    return PingQueued(delivery_id=delivery_id, message="The ping is on its way.")


@router.get("/email", response_model=EmailPublic)
async def get_email(user: UserDep, services: ServicesDep) -> EmailPublic:
    """Where your email notifications go, and which ones you get."""
    async with services.db.connection() as conn:
        row = await targets.email_of(conn, user.user_id)
    return _email(row)


@router.put("/email", response_model=EmailPublic, responses=error_responses(409))
async def set_email(body: EmailChange, user: UserDep, services: ServicesDep) -> EmailPublic:
    """Get notifications by email at `address` (replacing the one you had)."""
    if not services.settings.smtp_host:
        raise Conflict("This server sends no email: its admin has not set SHOAL_SMTP_HOST. "
                       "Use a webhook instead.", code="email_unavailable")
    async with services.db.begin() as conn:
        row = await targets.set_email(conn, user_id=user.user_id, address=body.address,
                                      events=[NotificationType(e) for e in body.events],
                                      now=utcnow())
    return _email(row)


@router.delete("/email", status_code=204)
async def delete_email(user: UserDep, services: ServicesDep) -> Response:
    """Stop email notifications."""
    async with services.db.begin() as conn:
        if not await targets.clear_email(conn, user.user_id):
            raise NotFound("You get no email notifications.")
    return Response(status_code=204)


@router.get("/deliveries", response_model=DeliveryList)
async def list_deliveries(
    user: UserDep, services: ServicesDep,
    webhook_id: Annotated[str | None, Query(max_length=64, description=(
        "Only this webhook's deliveries."))] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> DeliveryList:
    """Your latest deliveries, newest first: their status, tries, the receiver's last answer."""
    hook = None if webhook_id is None else parse_id(webhook_id, kind="webhook")
    async with services.db.connection() as conn:
        rows = await outbox.recent(conn, user.user_id, limit=limit, webhook_id=hook)
    return DeliveryList(deliveries=[_delivery(r) for r in rows])


def _webhook(row: sa.Row[Any]) -> WebhookPublic:
    return WebhookPublic(id=row.id, url=row.url, events=list(row.events),
                         enabled=row.disabled_at is None, created_at=row.created_at)


def _email(row: sa.Row[Any] | None) -> EmailPublic:
    if row is None:
        return EmailPublic(address=None, events=[])
    return EmailPublic(address=row.address, events=list(row.events), updated_at=row.updated_at)


def _delivery(row: sa.Row[Any]) -> DeliveryPublic:
    pending = row.status == DeliveryStatus.PENDING
    return DeliveryPublic(
        id=row.id, kind=row.kind, webhook_id=row.webhook_id, target=row.target,
        type=row.event_type, task_id=row.task_id, status=row.status, attempts=row.attempts,
        last_status_code=row.last_status_code, last_error=row.last_error,
        created_at=row.created_at, last_attempt_at=row.last_attempt_at,
        next_attempt_at=row.next_attempt_at if pending else None,
        delivered_at=row.delivered_at)
