"""Worker rows: registration by machine id, liveness, resources, history."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from shoal.protocol import WorkerRegister
from shoal.store.models import Attempt, Subtask, Task, Worker, table_of

workers = table_of(Worker)


async def find_worker_id(conn: AsyncConnection, machine_id: str) -> uuid.UUID | None:
    """The id of the worker registered from `machine_id`, if any."""
    found = (await conn.execute(
        sa.select(workers.c.id).where(workers.c.machine_id == machine_id))).scalar()
    return uuid.UUID(str(found)) if found is not None else None


def save_worker(
    conn: sa.Connection, worker_id: uuid.UUID, msg: WorkerRegister, *, exists: bool,
    token_id: uuid.UUID | None, now: datetime,
) -> None:
    """Register a worker, or re-register the same machine under its existing id."""
    values: dict[str, Any] = {
        "machine_name": msg.machine_name, "status": "online", "system_info": msg.system_info,
        "tools": [t.model_dump() for t in msg.tools], "slots": msg.slots, "token_id": token_id,
        "version_string": msg.version, "last_heartbeat": now,
    }
    if exists:
        conn.execute(sa.update(workers).where(workers.c.id == worker_id).values(values))
    else:
        conn.execute(sa.insert(workers).values(
            id=worker_id, machine_id=msg.machine_id, registered_at=now, **values))


def set_worker_status(conn: sa.Connection, worker_id: uuid.UUID, status: str) -> None:
    """Mark one worker online, busy or offline."""
    conn.execute(sa.update(workers).where(workers.c.id == worker_id).values(status=status))


def record_heartbeat(
    conn: sa.Connection, worker_id: uuid.UUID, *, cpu: float, memory: float, disk: float,
    status: str, now: datetime,
) -> None:
    """Store a worker's latest load."""
    conn.execute(sa.update(workers).where(workers.c.id == worker_id).values(
        cpu_percent=cpu, memory_percent=memory, disk_percent=disk, last_heartbeat=now,
        status=status,
    ))


async def mark_all_offline(conn: AsyncConnection) -> None:
    """At start-up no worker is connected to this copy yet."""
    await conn.execute(sa.update(workers).values(status="offline"))


async def any_online(conn: AsyncConnection, *, since: datetime) -> bool:
    """Whether any worker is online (or busy) and heartbeated after `since`."""
    q = sa.select(workers.c.id).where(workers.c.status.in_(["online", "busy"]),
                                      workers.c.last_heartbeat >= since).limit(1)
    return (await conn.execute(q)).first() is not None


async def list_workers(conn: AsyncConnection, *, status: str | None = None) -> list[sa.Row[Any]]:
    """Every known worker, newest registration first."""
    q = sa.select(workers).order_by(workers.c.registered_at.desc())
    if status:
        q = q.where(workers.c.status == status)
    return list((await conn.execute(q)).all())


async def get_worker(conn: AsyncConnection, worker_id: uuid.UUID) -> sa.Row[Any] | None:
    """One worker by id."""
    return (await conn.execute(sa.select(workers).where(workers.c.id == worker_id))).first()


async def worker_history(
    conn: AsyncConnection, worker_id: uuid.UUID, *, owner: uuid.UUID | None, limit: int = 10
) -> list[Any]:
    """The worker's most recent attempts with their subtask names: at `owner`'s tasks only,
    or at anybody's with `owner` None (an admin asks)."""
    a, s, t = table_of(Attempt), table_of(Subtask), table_of(Task)
    q = (sa.select(a.c.id, a.c.task_id, a.c.subtask_id, a.c.status, a.c.dispatched_at,
                   a.c.started_at, a.c.finished_at, s.c.name)
         .join(s, s.c.id == a.c.subtask_id)
         .where(a.c.worker_id == worker_id)
         .order_by(a.c.dispatched_at.desc()).limit(limit))
    if owner is not None:
        q = q.join(t, t.c.id == a.c.task_id).where(t.c.user_id == owner)
    return list((await conn.execute(q)).all())
