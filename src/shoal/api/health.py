"""Liveness (`/healthz`) and readiness (`/readyz`), both without authentication.

`/healthz` answers while the process serves requests. `/readyz` answers 200 only when this copy
can take work: the store and the event bus answer, the runtime's loop runs, and at least
`SHOAL_READY_WORKERS` workers are connected (`shoal up` waits for its own worker). Otherwise
503 with `Retry-After`, and a body saying which part is not ready.
"""

from __future__ import annotations

import asyncio

import sqlalchemy as sa
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from shoal import __version__
from shoal.api.deps import Services

router = APIRouter(tags=["health"])
CHECK_SECONDS = 2.0  # a dependency slower than this to answer counts as not ready


class Check(BaseModel):
    """One part of readiness."""

    ok: bool
    detail: str


class Readiness(BaseModel):
    """`/readyz`: `ready` or `not_ready`, and each part's state."""

    status: str
    checks: dict[str, Check]


@router.get("/healthz")
async def healthz(request: Request) -> JSONResponse:
    """Liveness and a few counts."""
    services: Services = request.app.state.services
    return JSONResponse({"status": "ok", "version": __version__,
                         **services.runtime.snapshot_counts()})


@router.get("/readyz", response_model=Readiness,
            responses={503: {"model": Readiness, "description": "Some part is not ready."}})
async def readyz(request: Request) -> JSONResponse:
    """Whether this copy can take work now, and if not, which part is not ready."""
    services: Services = request.app.state.services
    store, bus = await asyncio.gather(_store(services), _bus(services))
    checks = {"store": store, "bus": bus, "runtime": _runtime(services),
              "workers": _workers(services)}
    ready = all(c.ok for c in checks.values())
    body = Readiness(status="ready" if ready else "not_ready", checks=checks)
    return JSONResponse(body.model_dump(), status_code=200 if ready else 503,
                        headers=None if ready else {"Retry-After": "1"})


async def _store(services: Services) -> Check:
    try:
        async with asyncio.timeout(CHECK_SECONDS), services.db.connection() as conn:
            await conn.execute(sa.text("SELECT 1"))
    except Exception as exc:  # any failure means not ready; the reason is shown by type only
        return Check(ok=False, detail=f"the database did not answer ({type(exc).__name__})")
    return Check(ok=True, detail=services.db.dialect)


async def _bus(services: Services) -> Check:
    ok = await services.bus.ping()
    return Check(ok=ok, detail=type(services.bus).__name__ + ("" if ok else " did not answer"))


def _runtime(services: Services) -> Check:
    ok = services.runtime.ready.is_set()
    return Check(ok=ok, detail="running" if ok else "starting or stopping")


def _workers(services: Services) -> Check:
    connected, required = len(services.runtime.fleet), services.settings.ready_workers
    return Check(ok=connected >= required,
                 detail=f"{connected} connected to this copy, {required} required")
