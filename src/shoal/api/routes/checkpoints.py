"""Checkpoints: list, read, and decide — approve, reject (cancels the task), or correct a
subtask with guidance (seed 004 §4.1.3), or answer a workflow's question. Deciding a decided
checkpoint, or deciding one in a way that does not fit it, is 409; another user's checkpoint
is 404. The lookups and the answer live in `shoal.api.decisions`, which the client socket's
`answer` frame goes through too."""

from __future__ import annotations

from typing import Annotated, Any

import sqlalchemy as sa
from fastapi import APIRouter, Query

from shoal.api import decisions
from shoal.api.deps import ServicesDep, UserDep
from shoal.api.errors import error_responses
from shoal.api.schemas.checkpoints import (
    AnswerBody,
    CheckpointDecided,
    CheckpointOut,
    CheckpointPage,
    CorrectBody,
    CorrectionStarted,
    RejectBody,
)
from shoal.engine.inputs import CheckpointDecision
from shoal.ids import ID_PREFIX, id_range, parse_id
from shoal.limits import MAX_INT64
from shoal.store import queries

router = APIRouter(prefix="/api/v1/checkpoints", tags=["checkpoints"],
                   responses=error_responses(401, 404, 409, 413, 422, 429, 503))

CheckpointStatus = Annotated[str | None, Query(pattern="^(pending_review|approved|rejected|"
                                                       "corrected|answered)$")]


@router.get("", response_model=CheckpointPage)
async def list_checkpoints(
    user: UserDep, services: ServicesDep, status: CheckpointStatus = None,
    task_id: Annotated[str | None, Query()] = None,
    id_prefix: Annotated[str | None, Query(pattern=ID_PREFIX, description=(
        "Only the checkpoints whose id starts with this: hex digits, with or without the "
        "id's dashes"))] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    offset: Annotated[int, Query(ge=0, le=MAX_INT64)] = 0,
) -> CheckpointPage:
    """The caller's checkpoints, newest first (`status=pending_review` for the open ones;
    `id_prefix` to look up a short id)."""
    tid = parse_id(task_id, kind="task") if task_id else None
    async with services.db.connection() as conn:
        rows, total = await queries.list_checkpoints(
            conn, user_id=user.user_id, task_id=tid, status=status, limit=limit,
            offset=offset, ids=id_range(id_prefix) if id_prefix else None)
    return CheckpointPage(checkpoints=[checkpoint_out(r) for r in rows], total=total,
                          limit=limit, offset=offset)


@router.get("/{checkpoint_id}", response_model=CheckpointOut)
async def get_checkpoint(checkpoint_id: str, user: UserDep,
                         services: ServicesDep) -> CheckpointOut:
    """One checkpoint: why it opened, what was done, the scores, what comes next."""
    async with services.db.connection() as conn:
        row = await decisions.owned(conn, checkpoint_id, user.user_id)
        corrections = await queries.checkpoint_corrections(conn, row.id)
        audit = await queries.audit_entries(conn, object_id=row.id)
    return checkpoint_out(row, corrections, audit)


@router.post("/{checkpoint_id}/approve", response_model=CheckpointDecided)
async def approve(checkpoint_id: str, user: UserDep, services: ServicesDep) -> CheckpointDecided:
    """Accept the work so far; the task continues."""
    row = await decisions.pending(services, checkpoint_id, user.user_id)
    await services.runtime.decide_checkpoint(
        row.task_id, user.user_id, CheckpointDecision(row.id, "approve", user.user_id))
    return CheckpointDecided(checkpoint_id=row.id, status="approved",
                             message="Checkpoint approved. Continuing to next subtasks...")


@router.post("/{checkpoint_id}/answer", response_model=CheckpointDecided)
async def answer(checkpoint_id: str, body: AnswerBody, user: UserDep,
                 services: ServicesDep) -> CheckpointDecided:
    """Answer a workflow's question (a `human` step): the answer is the step's output (an
    answer of only blanks is 422, as an empty one is)."""
    return await decisions.answer(services, checkpoint_id, user.user_id, body)


@router.post("/{checkpoint_id}/reject", response_model=CheckpointDecided)
async def reject(checkpoint_id: str, body: RejectBody, user: UserDep,
                 services: ServicesDep) -> CheckpointDecided:
    """Reject the work: the task is cancelled and its agents are stopped."""
    row = await decisions.pending(services, checkpoint_id, user.user_id)
    await services.runtime.decide_checkpoint(
        row.task_id, user.user_id,
        CheckpointDecision(row.id, "reject", user.user_id, reason=body.reason.strip()))
    return CheckpointDecided(checkpoint_id=row.id, status="rejected",
                             message="Checkpoint rejected. Task cancelled.")


@router.post("/{checkpoint_id}/correct", response_model=CorrectionStarted)
async def correct(checkpoint_id: str, body: CorrectBody, user: UserDep,
                  services: ServicesDep) -> CorrectionStarted:
    """Send a subtask back with guidance; it re-executes, then is evaluated again."""
    row = await decisions.pending(services, checkpoint_id, user.user_id)
    await services.runtime.decide_checkpoint(row.task_id, user.user_id, CheckpointDecision(
        row.id, "correct", user.user_id, subtask_id=body.subtask_id,
        correction_type=body.correction_type, guidance=body.guidance,
        reference_files=tuple(body.reference_files), apply_to_future=body.apply_to_future))
    async with services.db.connection() as conn:
        made = await queries.checkpoint_corrections(conn, row.id)
    last = made[-1] if made else None
    return CorrectionStarted(
        checkpoint_id=row.id, correction_id=last.id if last else None,
        correction_subtask_id=last.correction_subtask_id if last else None,
        status="re_executing", message="Correction sent to agent. Re-executing subtask...")


def checkpoint_out(row: sa.Row[Any], corrections: list[sa.Row[Any]] | None = None,
                   audit: list[sa.Row[Any]] | None = None) -> CheckpointOut:
    """A checkpoint row in the API's shape."""
    data: dict[str, Any] = dict(row.data or {})
    return CheckpointOut(
        checkpoint_id=row.id, task_id=row.task_id, task_description=row.task_description,
        status=row.status, reason=row.reason, message=data.get("message"),
        triggered_at=row.created_at, subtask_id=row.subtask_id, subtask=data.get("subtask"),
        subtasks_completed=list(data.get("subtasks_completed") or []),
        evaluation_scores=data.get("evaluation_scores"),
        overall_score=data.get("overall_score"), average_score=data.get("average_score"),
        next_subtasks=list(data.get("next_subtasks") or []), deadline_at=row.deadline_at,
        deadline_action=row.deadline_action, decision=row.decision,
        decided_by=row.decided_by, decided_at=row.decided_at, notes=row.notes,
        question=data.get("question"),
        corrections=[{"correction_id": str(c.id), "subtask_id": str(c.subtask_id),
                      "correction_subtask_id": str(c.correction_subtask_id),
                      "correction_type": c.correction_type, "guidance": c.guidance,
                      "reference_files": list(c.reference_files or []),
                      "apply_to_future": c.apply_to_future,
                      "created_at": c.created_at.isoformat()}
                     for c in corrections or []],
        audit=[{"action": a.action, "user_id": str(a.user_id) if a.user_id else None,
                "at": a.created_at.isoformat(), "details": dict(a.details or {})}
               for a in audit or []])
