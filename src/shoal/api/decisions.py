"""Deciding a checkpoint, below the routes: `routes/checkpoints.py` and the client socket's
`answer` frame take the one path here, so they answer alike — 404 for an unknown checkpoint
or another user's, 409 for one already decided (or a decision that does not fit it), 422
naming `answer` for an answer that is empty, only blanks or too long."""

from __future__ import annotations

import uuid
from typing import Any

import sqlalchemy as sa
from pydantic import ValidationError

from shoal.api.deps import Services
from shoal.api.schemas.checkpoints import AnswerBody, CheckpointDecided
from shoal.engine.inputs import CheckpointDecision
from shoal.engine.quality import PENDING_REVIEW
from shoal.errors import Conflict, InvalidInput, NotFound
from shoal.ids import parse_id
from shoal.store import queries


async def owned(conn: Any, checkpoint_id: str, user_id: uuid.UUID) -> sa.Row[Any]:
    """The user's checkpoint; `NotFound` for a malformed id, an unknown one, or another's."""
    cid = parse_id(checkpoint_id, kind="checkpoint")
    row = await queries.get_checkpoint(conn, cid, user_id=user_id)
    if row is None:
        raise NotFound(f"No checkpoint {checkpoint_id}.", details={"checkpoint_id": checkpoint_id})
    return row


async def pending(services: Services, checkpoint_id: str, user_id: uuid.UUID) -> sa.Row[Any]:
    """The user's checkpoint, still waiting for a decision; `Conflict` once decided."""
    async with services.db.connection() as conn:
        row = await owned(conn, checkpoint_id, user_id)
    if row.status != PENDING_REVIEW:
        raise Conflict(f"This checkpoint was already decided ({row.status}).",
                       code="checkpoint_decided",
                       details={"checkpoint_id": str(row.id), "status": row.status})
    return row


def answer_body(answer: str) -> AnswerBody:
    """An answer that did not come as a request body (the client socket's), checked by the
    REST body's model; `InvalidInput` in the shape the REST route's 422 has."""
    try:
        return AnswerBody(answer=answer)
    except ValidationError as exc:
        details = [{"field": ".".join(str(p) for p in e["loc"]) or "answer", "message": e["msg"],
                    "type": e["type"]} for e in exc.errors(include_url=False)]
        raise InvalidInput("The request is not valid: check " + ", ".join(
            d["field"] for d in details[:5]) + ".", code="validation_error",
            details=details) from None


async def answer(services: Services, checkpoint_id: str, user_id: uuid.UUID,
                 body: AnswerBody) -> CheckpointDecided:
    """Answer a workflow's question (a `human` step): the answer becomes the step's output."""
    row = await pending(services, checkpoint_id, user_id)
    await services.runtime.decide_checkpoint(row.task_id, user_id, CheckpointDecision(
        row.id, "answer", user_id, answer=body.answer.strip()))
    return CheckpointDecided(checkpoint_id=row.id, status="answered",
                             message="Answered. The task goes on.")
