"""What the notification tests share: quick settings, users, tasks, events, targets and
deliveries in the store, and a notifier running beside the test."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from shoal.config import Settings
from shoal.engine.model import TaskRecord
from shoal.events import EventType, NewEvent
from shoal.notify import Notifier, outbox, targets
from shoal.notify.delivery import SUBSCRIBABLE, NotificationType
from shoal.states import TaskStatus
from shoal.store import accounts
from shoal.store.db import Database
from shoal.store.events import append_events_sync
from shoal.store.models import utcnow
from shoal.store.state import insert_task_sync
from tests.conftest import make_settings

SECRET = "s3cret-s3cret-s3cret"
BASE, FACTOR, JITTER = 0.2, 2.0, 0.1  # backoff: 0.2 s, 0.4 s, 0.8 s (± 10 %)


def fast(tmp_path: Path, **overrides: Any) -> Settings:
    """Test settings with a quick notifier: short polls and backoff, four tries."""
    values: dict[str, Any] = {
        "notify_poll_interval": 0.05, "notify_retry_base": BASE,
        "notify_retry_factor": FACTOR, "notify_retry_jitter": JITTER,
        "notify_max_attempts": 4, "webhook_timeout": 5.0, "public_url": "https://shoal.test"}
    values.update(overrides)
    return make_settings(tmp_path, **values)


async def add_user(db: Database, name: str) -> uuid.UUID:
    """A new user."""
    async with db.begin() as conn:
        return await accounts.create_user(conn, username=name, password_hash="x",
                                          is_admin=False, email=None, now=utcnow())


async def add_task(db: Database, user_id: uuid.UUID, description: str = "Echo things",
                   status: TaskStatus = TaskStatus.IN_PROGRESS) -> uuid.UUID:
    """A stored task of `user_id`."""
    now = utcnow()
    task = TaskRecord(id=uuid.uuid4(), user_id=user_id, description=description,
                      status=status, created_at=now, updated_at=now)
    await db.run_write(lambda conn: insert_task_sync(conn, task))
    return task.id


def event(kind: EventType, task_id: uuid.UUID, user_id: uuid.UUID | None,
          **data: Any) -> NewEvent:
    """An event of a task."""
    return NewEvent(type=kind, data=data, task_id=task_id, user_id=user_id)


def completed(task_id: uuid.UUID, user_id: uuid.UUID) -> NewEvent:
    """The `task_complete` event of a task."""
    return event(EventType.TASK_COMPLETE, task_id, user_id, status="completed")


async def append(db: Database, *new: NewEvent) -> list[int]:
    """Commit `new` to the event log in one transaction; their seqs."""
    stored = await db.run_write(lambda conn: append_events_sync(conn, list(new), utcnow()))
    return [e.seq for e in stored]


async def add_webhook(db: Database, user_id: uuid.UUID, url: str, *,
                      events: Sequence[NotificationType] = SUBSCRIBABLE,
                      secret: str = SECRET) -> uuid.UUID:
    """Register a webhook for `user_id`; its id."""
    async with db.begin() as conn:
        row = await targets.add_webhook(conn, user_id=user_id, url=url, secret=secret,
                                        events=events, now=utcnow(), limit=100)
    return uuid.UUID(str(row.id))


async def set_email(db: Database, user_id: uuid.UUID, address: str, *,
                    events: Sequence[NotificationType] = SUBSCRIBABLE) -> None:
    """Send `user_id`'s notifications to `address` too."""
    async with db.begin() as conn:
        await targets.set_email(conn, user_id=user_id, address=address, events=events,
                                now=utcnow())


async def deliveries(db: Database, **where: Any) -> list[sa.Row[Any]]:
    """Every delivery (matching the columns given), in the order they were enqueued."""
    table = outbox.deliveries
    q = sa.select(table).where(*(table.c[k] == v for k, v in where.items()))
    async with db.connection() as conn:
        return list((await conn.execute(q.order_by(table.c.event_seq, table.c.target))).all())


async def delivery(db: Database, delivery_id: uuid.UUID | str) -> sa.Row[Any] | None:
    """One delivery by id."""
    found = await deliveries(db, id=uuid.UUID(str(delivery_id)))
    return found[0] if found else None


async def cursor(db: Database) -> int | None:
    """Where the notifier's cursor stands."""
    async with db.connection() as conn:
        seq: int | None = await conn.run_sync(outbox.read_cursor)
    return seq


@contextlib.asynccontextmanager
async def running_notifier(settings: Settings, db: Database) -> AsyncIterator[Notifier]:
    """A notifier running on `db` until the block exits (then cancelled, as at shutdown)."""
    notifier = Notifier(settings, db)
    runner = asyncio.create_task(notifier.run(), name="test-notifier")
    try:
        yield notifier
    finally:
        runner.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            async with asyncio.timeout(10):  # a notifier that ignores its cancellation fails
                await runner
