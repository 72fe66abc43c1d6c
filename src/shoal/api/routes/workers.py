"""Workers: the fleet with its load and history, and the tokens workers sign in with."""

from __future__ import annotations

import uuid
from typing import Annotated, Any

import sqlalchemy as sa
from fastapi import APIRouter, Query

from shoal.api.deps import ServicesDep, UserDep
from shoal.api.errors import error_responses
from shoal.api.schemas.workers import (
    ResourceSample,
    WorkerDetail,
    WorkerList,
    WorkerPublic,
    WorkerTokenCreate,
    WorkerTokenCreated,
    WorkerTokenPublic,
)
from shoal.auth.tokens import Claims, new_opaque_token
from shoal.errors import Forbidden, NotFound
from shoal.ids import parse_id
from shoal.runtime.fleet import Connection
from shoal.store import accounts, queries
from shoal.store import workers as worker_rows
from shoal.store.models import utcnow

router = APIRouter(prefix="/api/v1/workers", tags=["workers"],
                   responses=error_responses(401, 403, 404, 413, 422, 429))


@router.get("", response_model=WorkerList)
async def list_workers(
    user: UserDep, services: ServicesDep,
    status: Annotated[str | None, Query(pattern="^(online|offline|busy)$")] = None,
) -> WorkerList:
    """Every known worker, with its tools, load and current subtask (one of the caller's; an
    admin sees anybody's)."""
    async with services.db.connection() as conn:
        rows = await worker_rows.list_workers(conn, status=status)
        current = await queries.current_attempts(conn, owner=_owner(user))
    fleet = services.runtime.fleet
    return WorkerList(workers=[_public(r, current.get(r.id), fleet.get(r.id)) for r in rows])


@router.post("/tokens", status_code=201, response_model=WorkerTokenCreated)
async def create_token(
    body: WorkerTokenCreate, user: UserDep, services: ServicesDep
) -> WorkerTokenCreated:
    """A new worker token (admins only); the secret is shown once."""
    _admin(user.is_admin)
    token, digest = new_opaque_token("shw_")
    async with services.db.begin() as conn:
        token_id = await accounts.add_token(conn, kind="worker", name=body.name,
                                            token_hash=digest, user_id=user.user_id,
                                            now=utcnow())
    return WorkerTokenCreated(token_id=token_id, name=body.name, token=token)


@router.get("/tokens", response_model=list[WorkerTokenPublic])
async def list_tokens(user: UserDep, services: ServicesDep) -> list[WorkerTokenPublic]:
    """Worker tokens without their secrets (admins only)."""
    _admin(user.is_admin)
    async with services.db.connection() as conn:
        rows = await accounts.list_tokens(conn, kind="worker")
    return [WorkerTokenPublic(token_id=r.id, name=r.name, created_at=r.created_at,
                              revoked_at=r.revoked_at, last_used_at=r.last_used_at)
            for r in rows]


@router.delete("/tokens/{token_id}", status_code=204)
async def revoke_token(token_id: str, user: UserDep, services: ServicesDep) -> None:
    """Revoke a worker token; workers using it can no longer connect."""
    _admin(user.is_admin)
    tid = parse_id(token_id, kind="token")
    async with services.db.begin() as conn:
        if not await accounts.revoke_token(conn, tid, utcnow()):
            raise NotFound(f"No live worker token {token_id}.")


@router.get("/{worker_id}", response_model=WorkerDetail)
async def get_worker(worker_id: str, user: UserDep, services: ServicesDep) -> WorkerDetail:
    """One worker with system info and its last ten attempts (at the caller's tasks; an admin
    sees anybody's)."""
    wid = parse_id(worker_id, kind="worker")
    async with services.db.connection() as conn:
        row = await worker_rows.get_worker(conn, wid)
        if row is None:
            raise NotFound(f"No worker {worker_id}.")
        history = await worker_rows.worker_history(conn, wid, owner=_owner(user))
        current = (await queries.current_attempts(conn, owner=_owner(user))).get(wid)
    base = _public(row, current, services.runtime.fleet.get(wid))
    return WorkerDetail(
        **base.model_dump(), system_info=row.system_info or {},
        current=None if current is None else {
            "task_id": str(current.task_id), "subtask_id": str(current.subtask_id),
            "subtask_name": current.name,
            "started_at": (current.started_at or current.dispatched_at).isoformat()},
        task_history=[{
            "task_id": str(h.task_id), "subtask_id": str(h.subtask_id), "subtask_name": h.name,
            "status": h.status, "completed_at": h.finished_at.isoformat() if h.finished_at
            else None, "duration_seconds": _duration(h)} for h in history],
    )


def _public(
    r: sa.Row[Any], current: sa.Row[Any] | None, live: Connection | None
) -> WorkerPublic:
    tools = list(r.tools or [])
    return WorkerPublic(
        worker_id=r.id, machine_id=r.machine_id, machine_name=r.machine_name, status=r.status,
        tools=[t.get("name", "?") for t in tools], tool_details=tools, slots=r.slots,
        resources={"cpu_percent": r.cpu_percent, "memory_percent": r.memory_percent,
                   "disk_percent": r.disk_percent},
        current_task=current.subtask_id if current is not None else None,
        last_heartbeat=r.last_heartbeat, registered_at=r.registered_at,
        recent=[ResourceSample(at=x.at, cpu_percent=x.cpu_percent,
                               memory_percent=x.memory_percent, disk_percent=x.disk_percent)
                for x in (live.samples if live is not None else ())],
    )


def _duration(h: sa.Row[Any]) -> float | None:
    if h.finished_at is None:
        return None
    seconds: float = (h.finished_at - (h.started_at or h.dispatched_at)).total_seconds()
    return round(seconds, 3)


def _owner(user: Claims) -> uuid.UUID | None:
    """Whose attempts a worker's views show: the caller's, or everybody's for an admin."""
    return None if user.is_admin else user.user_id


def _admin(is_admin: bool) -> None:
    if not is_admin:
        raise Forbidden("Only an admin can manage worker tokens.")
