"""Which events of the log become notifications, and what a notification's body says.

A body is the same for every target (a webhook gets it as JSON, an email as text):

```
{"id": "<delivery id>", "type": "task.completed", "created_at": "2026-11-28T10:00:00Z",
 "task": {"id": "…", "description": "…", "status": "completed", "url": "<base url>/tasks/<id>"},
 "checkpoint": {…}}        (only for checkpoint.waiting; "error" in task only for task.failed)
```

It holds what the task's owner may see of their own task, nothing of anyone else's, and no
secret.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from shoal.events import EventType
from shoal.notify.delivery import NotificationType
from shoal.states import TaskStatus

# The events worth a notification; `task_update` only when it says the budget ran out.
WATCHED_EVENTS = (EventType.TASK_COMPLETE, EventType.TASK_FAILED, EventType.CHECKPOINT_READY)
_BY_EVENT: dict[str, NotificationType] = {
    EventType.TASK_COMPLETE: NotificationType.TASK_COMPLETED,
    EventType.TASK_FAILED: NotificationType.TASK_FAILED,
    EventType.CHECKPOINT_READY: NotificationType.CHECKPOINT_WAITING,
}
_TASK_STATUS = {
    NotificationType.TASK_COMPLETED: TaskStatus.COMPLETED,
    NotificationType.TASK_FAILED: TaskStatus.FAILED,
    NotificationType.TASK_BUDGET_EXCEEDED: TaskStatus.BUDGET_EXCEEDED,
    NotificationType.CHECKPOINT_WAITING: TaskStatus.CHECKPOINT,
}
_CHECKPOINT_FIELDS = ("reason", "message", "subtask_id", "deadline_at", "question")


@dataclass(frozen=True, slots=True)
class TaskFacts:
    """What a notification says of its task."""

    id: uuid.UUID
    description: str
    status: str


def notification_type(event_type: str, data: Mapping[str, Any]) -> NotificationType | None:
    """The notification an event of the log is worth, if any."""
    if event_type == EventType.TASK_UPDATE:
        if data.get("status") == TaskStatus.BUDGET_EXCEEDED:
            return NotificationType.TASK_BUDGET_EXCEEDED
        return None
    return _BY_EVENT.get(event_type)


def build_payload(
    *, delivery_id: uuid.UUID, kind: NotificationType, created_at: datetime,
    data: Mapping[str, Any], task: TaskFacts | None, base_url: str,
) -> dict[str, Any]:
    """The body of one notification of `kind`, from its event's `data` and its task."""
    body: dict[str, Any] = {"id": str(delivery_id), "type": kind.value,
                            "created_at": iso(created_at)}
    if task is not None:
        status = _TASK_STATUS.get(kind)
        if status is TaskStatus.CHECKPOINT and data.get("reason") == "question":
            status = TaskStatus.AWAITING_INPUT  # a workflow's question waits for an answer
        body["task"] = {"id": str(task.id), "description": task.description,
                        "status": status.value if status else task.status,
                        "url": task_url(base_url, task.id)}
        if kind is NotificationType.TASK_FAILED and isinstance(data.get("error"), str):
            body["task"]["error"] = data["error"]
    if kind is NotificationType.CHECKPOINT_WAITING:
        body["checkpoint"] = {"id": data.get("checkpoint_id"),
                              **{k: data.get(k) for k in _CHECKPOINT_FIELDS if k in data}}
    return body


def ping_payload(delivery_id: uuid.UUID, now: datetime) -> dict[str, Any]:
    """The body of a test ping."""
    return {"id": str(delivery_id), "type": NotificationType.PING.value,
            "created_at": iso(now), "message": "A test notification from Shoal."}


def task_url(base_url: str, task_id: uuid.UUID) -> str:
    """Where a person sees the task in the dashboard."""
    return f"{base_url.rstrip('/')}/tasks/{task_id}"


def iso(moment: datetime) -> str:
    """An instant as ISO 8601 in UTC with a `Z`."""
    return moment.isoformat().replace("+00:00", "Z")
