"""The deliveries table as an outbox: filled from the event log, emptied by the senders.

`enqueue_from_log` reads the events after the notifier's cursor and, in the caller's one
transaction, inserts a delivery per matching event and subscribed target and moves the cursor:
a crash either side of the commit enqueues each notification exactly once. On PostgreSQL the
cursor row is taken `FOR UPDATE SKIP LOCKED`, so among several control-plane copies one at a
time moves it (the others skip the round); SQLite has one writer. Event sequence numbers grow
in commit order (store/events.py), so nothing can commit behind the cursor.

`claim_due` takes pending deliveries whose time has come (`FOR UPDATE SKIP LOCKED` on
PostgreSQL), counts the try and pushes `next_attempt_at` a lease ahead, so a copy that dies
mid-try leaves the delivery to be tried again once the lease runs out; `record` stores how the
try went, unless another copy has tried it since (the try number is the fence).

The sync functions run inside `Database.run_write`; the async ones on the API's connections.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from shoal.events import EventType
from shoal.notify import targets
from shoal.notify.delivery import (
    DeliveryStatus,
    DueDelivery,
    NotificationType,
    Outcome,
    Settled,
    TargetKind,
)
from shoal.notify.payload import (
    WATCHED_EVENTS,
    TaskFacts,
    build_payload,
    notification_type,
    ping_payload,
)
from shoal.states import TaskStatus
from shoal.store.models import (
    PENDING_DELIVERY,
    Delivery,
    EventRow,
    NotifierCursor,
    Task,
    table_of,
)

deliveries = table_of(Delivery)
cursor_table = table_of(NotifierCursor)
events = table_of(EventRow)
tasks = table_of(Task)
CURSOR_ID = 1
MAX_ERROR = 1000  # characters of an error kept


@dataclass(frozen=True, slots=True)
class Enqueued:
    """What one round of `enqueue_from_log` did."""

    deliveries: int  # how many it inserted
    cursor: int  # where the cursor stands now
    more: bool  # it stopped at its limit: run it again
    skipped: bool = False  # another copy holds the cursor (PostgreSQL)


def ensure_cursor(conn: sa.Connection, *, now: datetime) -> None:
    """Create the cursor row at the end of the log if it is missing (migration 0008 makes it)."""
    if conn.execute(sa.select(cursor_table.c.id).where(cursor_table.c.id == CURSOR_ID)).first():
        return
    newest = conn.execute(sa.select(events.c.seq, events.c.created_at)
                          .order_by(events.c.seq.desc()).limit(1)).first()
    conn.execute(sa.insert(cursor_table).values(
        id=CURSOR_ID, seq=newest.seq if newest else 0,
        seq_created_at=newest.created_at if newest else None, updated_at=now))


def read_cursor(conn: sa.Connection) -> int | None:
    """Where the cursor stands (None: no cursor row yet)."""
    value = conn.execute(sa.select(cursor_table.c.seq)
                         .where(cursor_table.c.id == CURSOR_ID)).scalar()
    return None if value is None else int(value)


def enqueue_from_log(conn: sa.Connection, *, now: datetime, base_url: str, limit: int,
                     email: bool) -> Enqueued:
    """Enqueue the deliveries of up to `limit` matching events after the cursor and move it;
    email targets only with `email` (the server has SMTP settings)."""
    pick = sa.select(cursor_table.c.seq, cursor_table.c.seq_created_at).where(
        cursor_table.c.id == CURSOR_ID)
    if conn.dialect.name == "postgresql":
        pick = pick.with_for_update(skip_locked=True)
    mark = conn.execute(pick).first()
    if mark is None:
        return Enqueued(0, -1, more=False, skipped=True)
    cursor = _rewound(conn, int(mark.seq), mark.seq_created_at)
    # Every event up to `high` has committed: they commit in sequence order.
    high = conn.execute(sa.select(events.c.seq, events.c.created_at)
                        .order_by(events.c.seq.desc()).limit(1)).first()
    top = int(high.seq) if high else 0
    rows = conn.execute(
        sa.select(events).where(events.c.seq > cursor, events.c.seq <= top, _watched(),
                                events.c.user_id.in_(targets.subscribed_users(email=email)))
        .order_by(events.c.seq).limit(limit)).all()
    new = _deliveries_for(conn, rows, now=now, base_url=base_url, email=email)
    if new:
        conn.execute(sa.insert(deliveries), new)
    full = len(rows) == limit
    moved = rows[-1] if full else high
    if moved is not None:
        conn.execute(sa.update(cursor_table).where(cursor_table.c.id == CURSOR_ID).values(
            seq=moved.seq, seq_created_at=moved.created_at, updated_at=now))
    return Enqueued(len(new), int(moved.seq) if moved is not None else cursor, more=full)


def _rewound(conn: sa.Connection, seq: int, created_at: datetime | None) -> int:
    """Where reading must resume: `seq`, unless the event the cursor passed there is gone
    (its task was deleted) or another took its seq (SQLite reuses the seqs of a deleted
    tail of the log); then the last surviving event the cursor had passed."""
    if not seq or created_at is None:
        return seq
    found = conn.execute(sa.select(events.c.created_at).where(events.c.seq == seq)).scalar()
    if found == created_at:
        return seq
    kept = conn.execute(sa.select(sa.func.max(events.c.seq)).where(
        events.c.seq <= seq, events.c.created_at <= created_at)).scalar()
    return int(kept or 0)


def _watched() -> sa.ColumnElement[bool]:
    """Events that may be worth a notification (`notification_type` has the last word)."""
    return sa.or_(events.c.type.in_([e.value for e in WATCHED_EVENTS]),
                  sa.and_(events.c.type == EventType.TASK_UPDATE.value,
                          events.c.data["status"].as_string() == TaskStatus.BUDGET_EXCEEDED))


def _deliveries_for(conn: sa.Connection, rows: Sequence[sa.Row[Any]], *, now: datetime,
                    base_url: str, email: bool) -> list[dict[str, Any]]:
    """The delivery rows of these events: one per event and target that wants it."""
    kinds = {r.seq: notification_type(r.type, r.data) for r in rows}
    rows = [r for r in rows if kinds[r.seq] is not None and r.user_id is not None]
    facts = _task_facts(conn, {r.task_id for r in rows if r.task_id is not None})
    subs = targets.subscriptions(conn, {r.user_id for r in rows}, email=email)
    budget_told = _budget_told(conn, {r.task_id for r in rows if kinds[r.seq]
                                      is NotificationType.TASK_BUDGET_EXCEEDED})
    new: list[dict[str, Any]] = []
    for row in rows:
        kind = kinds[row.seq]
        assert kind is not None
        if kind is NotificationType.TASK_BUDGET_EXCEEDED:
            if row.task_id in budget_told:
                continue  # a later snapshot of a task that had run out already
            budget_told.add(row.task_id)
        for sub in subs[row.user_id]:
            if kind in sub.events:
                new.append(_delivery(row, kind, sub, facts.get(row.task_id), now=now,
                                     base_url=base_url))
    return new


def _delivery(row: sa.Row[Any], kind: NotificationType, sub: targets.Subscription,
              task: TaskFacts | None, *, now: datetime, base_url: str) -> dict[str, Any]:
    delivery_id = uuid.uuid4()
    payload = build_payload(delivery_id=delivery_id, kind=kind, created_at=row.created_at,
                            data=row.data, task=task, base_url=base_url)
    return {"id": delivery_id, "user_id": row.user_id, "kind": sub.kind.value,
            "webhook_id": sub.webhook_id, "target": sub.target, "event_seq": row.seq,
            "event_type": kind.value, "task_id": row.task_id, "payload": payload,
            "status": DeliveryStatus.PENDING.value, "attempts": 0, "next_attempt_at": now,
            "created_at": now}


def _task_facts(conn: sa.Connection, ids: Collection[uuid.UUID]) -> dict[uuid.UUID, TaskFacts]:
    if not ids:
        return {}
    found = conn.execute(sa.select(tasks.c.id, tasks.c.description, tasks.c.status)
                         .where(tasks.c.id.in_(list(ids))))
    return {r.id: TaskFacts(r.id, r.description, r.status) for r in found}


def _budget_told(conn: sa.Connection, task_ids: Collection[uuid.UUID]) -> set[uuid.UUID]:
    """Which of these tasks have had their budget notification enqueued already."""
    if not task_ids:
        return set()
    return set(conn.execute(sa.select(deliveries.c.task_id).where(
        deliveries.c.task_id.in_(list(task_ids)),
        deliveries.c.event_type == NotificationType.TASK_BUDGET_EXCEEDED.value)).scalars())


@dataclass(frozen=True, slots=True)
class Claimed:
    """Deliveries claimed for a try, and when the next pending one falls due."""

    due: list[DueDelivery]
    next_due: datetime | None


def claim_due(conn: sa.Connection, *, now: datetime, limit: int, lease: float,
              per_webhook: int, busy: Mapping[uuid.UUID, int]) -> Claimed:
    """Claim up to `limit` due deliveries, at most `per_webhook` in flight to one webhook
    (`busy`: how many this copy has in flight to each)."""
    full = [w for w, n in busy.items() if n >= per_webhook]
    due_now = sa.and_(PENDING_DELIVERY, deliveries.c.next_attempt_at <= now)
    pick = (sa.select(deliveries.c.id, deliveries.c.webhook_id).where(due_now)
            .order_by(deliveries.c.next_attempt_at).limit(limit * 2))
    if full:
        pick = pick.where(sa.or_(deliveries.c.webhook_id.is_(None),
                                 deliveries.c.webhook_id.not_in(full)))
    found = [(r.id, r.webhook_id) for r in conn.execute(pick)]
    ids = _within_caps(found, limit=limit, per_webhook=per_webhook, busy=busy)
    if ids and conn.dialect.name == "postgresql":
        # Lock only the chosen rows, skipping those another copy is claiming right now (and
        # checking again that they are due: that copy may have claimed them since).
        ids = list(conn.execute(sa.select(deliveries.c.id).where(deliveries.c.id.in_(ids),
                                                                  due_now)
                                .with_for_update(skip_locked=True)).scalars())
    due: list[DueDelivery] = []
    if ids:
        conn.execute(sa.update(deliveries).where(deliveries.c.id.in_(ids)).values(
            attempts=deliveries.c.attempts + 1, last_attempt_at=now,
            next_attempt_at=now + timedelta(seconds=lease)))
        due = _due(conn, ids)
    next_due = conn.execute(sa.select(sa.func.min(deliveries.c.next_attempt_at))
                            .where(PENDING_DELIVERY)).scalar()
    return Claimed(due, next_due)


def _within_caps(found: Sequence[tuple[uuid.UUID, uuid.UUID | None]], *, limit: int,
                 per_webhook: int, busy: Mapping[uuid.UUID, int]) -> list[uuid.UUID]:
    """The first `limit` of `found` (delivery id, webhook id) that keep each webhook within
    `per_webhook` in flight."""
    taken: dict[uuid.UUID, int] = dict(busy)
    ids: list[uuid.UUID] = []
    for delivery_id, webhook_id in found:
        if webhook_id is not None:
            if taken.get(webhook_id, 0) >= per_webhook:
                continue
            taken[webhook_id] = taken.get(webhook_id, 0) + 1
        ids.append(delivery_id)
        if len(ids) == limit:
            break
    return ids


def _due(conn: sa.Connection, ids: list[uuid.UUID]) -> list[DueDelivery]:
    """The claimed deliveries with their webhooks; those of a switched-off webhook fail."""
    hooks = targets.webhooks
    rows = conn.execute(
        sa.select(deliveries, hooks.c.url, hooks.c.secret, hooks.c.disabled_at)
        .select_from(deliveries.outerjoin(hooks, hooks.c.id == deliveries.c.webhook_id))
        .where(deliveries.c.id.in_(ids)).order_by(deliveries.c.next_attempt_at)).all()
    off = [r.id for r in rows if r.disabled_at is not None]
    if off:
        conn.execute(sa.update(deliveries).where(deliveries.c.id.in_(off)).values(
            status=DeliveryStatus.FAILED.value, last_error="The webhook was switched off."))
    return [DueDelivery(id=r.id, kind=TargetKind(r.kind), target=r.url or r.target,
                        secret=r.secret, event_type=NotificationType(r.event_type),
                        payload=r.payload, attempt=r.attempts, webhook_id=r.webhook_id)
            for r in rows if r.disabled_at is None]


def record(conn: sa.Connection, delivery: DueDelivery, outcome: Outcome,
           settled: Settled) -> bool:
    """Store how a try went; False if another try of it was claimed since (its result stays)."""
    error = outcome.error[:MAX_ERROR] if outcome.error else None
    done = conn.execute(sa.update(deliveries).where(
        deliveries.c.id == delivery.id, deliveries.c.attempts == delivery.attempt,
        PENDING_DELIVERY).values(
            status=settled.status.value, next_attempt_at=settled.next_attempt_at,
            delivered_at=settled.delivered_at, last_status_code=outcome.status_code,
            last_error=error))
    return bool(done.rowcount)


def release(conn: sa.Connection, cut: Sequence[DueDelivery], *, now: datetime) -> int:
    """Make tries cut short (the notifier stopped) due again now instead of when their leases
    end, those not claimed again since; how many."""
    released = 0
    for delivery in cut:
        done = conn.execute(sa.update(deliveries).where(
            deliveries.c.id == delivery.id, deliveries.c.attempts == delivery.attempt,
            PENDING_DELIVERY).values(next_attempt_at=now,
                                     last_error="Cut short: Shoal stopped."))
        released += done.rowcount
    return released


def prune(conn: sa.Connection, *, before: datetime) -> int:
    """Delete the deliveries that ended (delivered or failed) and were created before
    `before`; how many."""
    done = conn.execute(sa.delete(deliveries).where(
        deliveries.c.status != DeliveryStatus.PENDING.value, deliveries.c.created_at < before))
    return int(done.rowcount or 0)


async def add_ping(conn: AsyncConnection, *, user_id: uuid.UUID, webhook: sa.Row[Any],
                   now: datetime) -> uuid.UUID:
    """Enqueue a test ping to one of the user's webhooks, due now; its delivery id."""
    delivery_id = uuid.uuid4()
    await conn.execute(sa.insert(deliveries).values(
        id=delivery_id, user_id=user_id, kind=TargetKind.WEBHOOK.value, webhook_id=webhook.id,
        target=webhook.url, event_seq=None, event_type=NotificationType.PING.value,
        task_id=None, payload=ping_payload(delivery_id, now),
        status=DeliveryStatus.PENDING.value, attempts=0, next_attempt_at=now, created_at=now))
    return delivery_id


async def recent(conn: AsyncConnection, user_id: uuid.UUID, *, limit: int,
                 webhook_id: uuid.UUID | None = None) -> list[sa.Row[Any]]:
    """The user's newest deliveries (of one webhook, when given), newest first."""
    q = sa.select(deliveries).where(deliveries.c.user_id == user_id)
    if webhook_id is not None:
        q = q.where(deliveries.c.webhook_id == webhook_id)
    return list((await conn.execute(
        q.order_by(deliveries.c.created_at.desc(), deliveries.c.event_seq.desc())
        .limit(limit))).all())
