"""Request and response shapes of `/api/v1/workers`: worker tokens, workers and their resources."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from shoal.api.schemas.base import Strict


class WorkerTokenCreate(Strict):
    """`POST /api/v1/workers/tokens`."""

    name: str = Field(min_length=1, max_length=100)


class WorkerTokenCreated(BaseModel):
    """A new worker token; shown once."""

    token_id: uuid.UUID
    name: str
    token: str


class WorkerTokenPublic(BaseModel):
    """A worker token without its secret."""

    token_id: uuid.UUID
    name: str
    created_at: datetime
    revoked_at: datetime | None
    last_used_at: datetime | None


class ResourceSample(BaseModel):
    """One heartbeat's resource readings."""

    at: datetime
    cpu_percent: float
    memory_percent: float
    disk_percent: float


class WorkerPublic(BaseModel):
    """A worker in the list (seed §4.1.2)."""

    worker_id: uuid.UUID
    machine_id: str
    machine_name: str
    status: str
    tools: list[str]
    tool_details: list[dict[str, Any]]
    slots: int
    resources: dict[str, float | None]
    current_task: uuid.UUID | None
    last_heartbeat: datetime | None
    registered_at: datetime
    recent: list[ResourceSample] = Field(default_factory=list, description=(
        "The last heartbeats' readings, oldest first (up to 60), while the worker is "
        "connected to the control-plane copy that answers"))


class WorkerDetail(WorkerPublic):
    """One worker with its system info and recent history."""

    system_info: dict[str, Any]
    current: dict[str, Any] | None
    task_history: list[dict[str, Any]]


class WorkerList(BaseModel):
    """`GET /api/v1/workers`."""

    workers: list[WorkerPublic]
