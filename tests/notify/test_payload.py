"""Which events become notifications, and what their bodies say."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from shoal.notify.delivery import NotificationType
from shoal.notify.payload import TaskFacts, build_payload, notification_type

NOW = datetime(2026, 11, 28, 10, 0, tzinfo=UTC)
TASK = TaskFacts(uuid.UUID(int=7), "Write the report", "in_progress")


@pytest.mark.parametrize(("event", "data", "expected"), [
    ("task_complete", {"status": "completed"}, NotificationType.TASK_COMPLETED),
    ("task_failed", {"status": "failed", "error": "boom"}, NotificationType.TASK_FAILED),
    ("task_update", {"status": "budget_exceeded"}, NotificationType.TASK_BUDGET_EXCEEDED),
    ("checkpoint_ready", {"checkpoint_id": "c"}, NotificationType.CHECKPOINT_WAITING),
    ("task_update", {"status": "in_progress"}, None),
    ("task_cancelled", {"status": "cancelled"}, None),
    ("agent_log", {"line": "x"}, None),
])
def test_only_ends_budgets_and_checkpoints_are_notified(
        event: str, data: dict[str, str], expected: NotificationType | None) -> None:
    """Task ends, a budget running out and a waiting checkpoint; nothing else."""
    assert notification_type(event, data) == expected


def test_a_completion_names_the_task_and_links_to_it() -> None:
    """The body has the delivery id, the type, the time and the task with its link."""
    delivery_id = uuid.uuid4()
    body = build_payload(delivery_id=delivery_id, kind=NotificationType.TASK_COMPLETED,
                         created_at=NOW, data={"status": "completed", "usage": {"x": 1}},
                         task=TASK, base_url="https://shoal.example/")
    assert body == {"id": str(delivery_id), "type": "task.completed",
                    "created_at": "2026-11-28T10:00:00Z",
                    "task": {"id": str(TASK.id), "description": "Write the report",
                             "status": "completed",
                             "url": f"https://shoal.example/tasks/{TASK.id}"}}


def test_a_failure_carries_its_error() -> None:
    """`task.failed` adds the task's error."""
    body = build_payload(delivery_id=uuid.uuid4(), kind=NotificationType.TASK_FAILED,
                         created_at=NOW, data={"status": "failed", "error": "no worker"},
                         task=TASK, base_url="http://h")
    assert body["task"]["status"] == "failed"
    assert body["task"]["error"] == "no worker"


def test_a_waiting_checkpoint_says_why_and_what_it_asks() -> None:
    """`checkpoint.waiting` carries the checkpoint's id, reason, message and question."""
    body = build_payload(
        delivery_id=uuid.uuid4(), kind=NotificationType.CHECKPOINT_WAITING, created_at=NOW,
        data={"checkpoint_id": "cp1", "reason": "low_score", "message": "Score 4/10",
              "question": "Go on?", "status": "pending", "average_score": 4.0},
        task=TASK, base_url="http://h")
    assert body["task"]["status"] == "checkpoint_pending"
    assert body["checkpoint"] == {"id": "cp1", "reason": "low_score", "message": "Score 4/10",
                                  "question": "Go on?"}
