"""Where a user's notifications go: their webhooks and their email address, each with the
notification types it wants."""

from __future__ import annotations

import uuid
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncConnection

from shoal.errors import Conflict, NotFound
from shoal.notify.delivery import NotificationType, TargetKind
from shoal.store.models import EmailSetting, Webhook, table_of

webhooks = table_of(Webhook)
emails = table_of(EmailSetting)


@dataclass(frozen=True, slots=True)
class Subscription:
    """One target of a user and the notification types it wants."""

    kind: TargetKind
    target: str  # the URL or the address
    events: frozenset[NotificationType]
    webhook_id: uuid.UUID | None = None


async def list_webhooks(conn: AsyncConnection, user_id: uuid.UUID) -> list[sa.Row[Any]]:
    """The user's webhooks, oldest first."""
    return list((await conn.execute(sa.select(webhooks).where(webhooks.c.user_id == user_id)
                                    .order_by(webhooks.c.created_at, webhooks.c.id))).all())


async def add_webhook(
    conn: AsyncConnection, *, user_id: uuid.UUID, url: str, secret: str,
    events: Sequence[NotificationType], now: datetime, limit: int,
) -> sa.Row[Any]:
    """Register a webhook; `Conflict` when the user has `limit` already."""
    count = (await conn.execute(sa.select(sa.func.count()).select_from(webhooks)
                                .where(webhooks.c.user_id == user_id))).scalar_one()
    if count >= limit:
        raise Conflict(f"You have {count} webhooks, the most this server allows; delete one "
                       "(DELETE /api/v1/notifications/webhooks/{id}) first.",
                       code="too_many_webhooks", details={"limit": limit})
    webhook_id = uuid.uuid4()
    await conn.execute(sa.insert(webhooks).values(
        id=webhook_id, user_id=user_id, url=url, secret=secret,
        events=[e.value for e in events], created_at=now))
    return await webhook_of(conn, user_id, webhook_id)


async def webhook_of(conn: AsyncConnection, user_id: uuid.UUID,
                     webhook_id: uuid.UUID) -> sa.Row[Any]:
    """One of the user's webhooks; `NotFound` for another's or none."""
    row = (await conn.execute(sa.select(webhooks).where(
        webhooks.c.id == webhook_id, webhooks.c.user_id == user_id))).first()
    if row is None:
        raise NotFound("You have no webhook with that id; GET /api/v1/notifications/webhooks "
                       "lists yours.", details={"webhook_id": str(webhook_id)})
    return row


async def change_webhook(
    conn: AsyncConnection, *, user_id: uuid.UUID, webhook_id: uuid.UUID,
    events: Sequence[NotificationType] | None, enabled: bool | None, now: datetime,
) -> sa.Row[Any]:
    """Change what a webhook wants, or switch it off (its pending deliveries then fail) or on."""
    current = await webhook_of(conn, user_id, webhook_id)
    values: dict[str, Any] = {}
    if events is not None:
        values["events"] = [e.value for e in events]
    if enabled is not None and enabled == (current.disabled_at is not None):
        values["disabled_at"] = None if enabled else now
    if values:
        await conn.execute(sa.update(webhooks).where(webhooks.c.id == webhook_id).values(values))
    return await webhook_of(conn, user_id, webhook_id)


async def remove_webhook(conn: AsyncConnection, user_id: uuid.UUID,
                         webhook_id: uuid.UUID) -> None:
    """Delete a webhook and its deliveries; `NotFound` for another's or none."""
    done = await conn.execute(sa.delete(webhooks).where(
        webhooks.c.id == webhook_id, webhooks.c.user_id == user_id))
    if not done.rowcount:
        await webhook_of(conn, user_id, webhook_id)  # raises NotFound


async def email_of(conn: AsyncConnection, user_id: uuid.UUID) -> sa.Row[Any] | None:
    """The user's email setting, if they have one."""
    return (await conn.execute(sa.select(emails).where(emails.c.user_id == user_id))).first()


async def set_email(
    conn: AsyncConnection, *, user_id: uuid.UUID, address: str,
    events: Sequence[NotificationType], now: datetime,
) -> sa.Row[Any]:
    """Set (or replace) where the user's email notifications go and which ones they want."""
    values = {"user_id": user_id, "address": address, "events": [e.value for e in events],
              "updated_at": now}
    insert = pg_insert if conn.dialect.name == "postgresql" else sqlite_insert
    stmt = insert(emails).values(values)
    await conn.execute(stmt.on_conflict_do_update(
        index_elements=[emails.c.user_id],
        set_={"address": stmt.excluded.address, "events": stmt.excluded.events,
              "updated_at": stmt.excluded.updated_at}))
    row = await email_of(conn, user_id)
    assert row is not None
    return row


async def clear_email(conn: AsyncConnection, user_id: uuid.UUID) -> bool:
    """Stop email notifications; whether there were any."""
    done = await conn.execute(sa.delete(emails).where(emails.c.user_id == user_id))
    return bool(done.rowcount)


def subscribed_users(*, email: bool) -> sa.Select[tuple[uuid.UUID]]:
    """The ids of users with an enabled webhook (or, with `email`, an email setting)."""
    hooks = sa.select(webhooks.c.user_id).where(webhooks.c.disabled_at.is_(None))
    if not email:
        return hooks
    return sa.select(sa.union(hooks, sa.select(emails.c.user_id)).subquery().c[0])


def subscriptions(conn: sa.Connection, user_ids: Collection[uuid.UUID], *,
                  email: bool) -> dict[uuid.UUID, list[Subscription]]:
    """Every enabled target of these users (email ones only with `email`), by user."""
    found: dict[uuid.UUID, list[Subscription]] = {u: [] for u in user_ids}
    if not found:
        return found
    for row in conn.execute(sa.select(webhooks).where(
            webhooks.c.user_id.in_(list(found)), webhooks.c.disabled_at.is_(None))
            .order_by(webhooks.c.created_at, webhooks.c.id)):
        found[row.user_id].append(Subscription(
            TargetKind.WEBHOOK, row.url, _types(row.events), webhook_id=row.id))
    if email:
        for row in conn.execute(sa.select(emails).where(emails.c.user_id.in_(list(found)))):
            found[row.user_id].append(Subscription(
                TargetKind.EMAIL, row.address, _types(row.events)))
    return found


def _types(values: Sequence[str]) -> frozenset[NotificationType]:
    """The stored event names that are (still) notification types."""
    known = {t.value for t in NotificationType}
    return frozenset(NotificationType(v) for v in values if v in known)
