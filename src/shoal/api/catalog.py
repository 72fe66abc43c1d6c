"""Which workflows a user may run: the server's catalog first, then the documents the user
added. A lookup below the routes, so that every route asks it the same way."""

from __future__ import annotations

import difflib
import uuid
from typing import Any

import structlog

from shoal.api.deps import Services
from shoal.errors import InvalidInput
from shoal.store import user_workflows
from shoal.workflows import Offered
from shoal.workflows.interpreter import DocumentWorkflow
from shoal.workflows.loading import load_document

log = structlog.get_logger(__name__)


async def offered_to(services: Services, user_id: uuid.UUID, name: str) -> Offered | None:
    """The workflow `name` as a task of `user_id` would run it: the server's, else theirs."""
    offered = services.workflows.get(name)
    if offered is not None:
        return offered
    async with services.db.connection() as conn:
        rows = await user_workflows.latest(conn, user_id, name)
    return stored_offer(rows[0]) if rows else None


def stored_offer(row: Any) -> Offered | None:
    """A stored document, checked again (a version of Shoal may have changed the rules)."""
    try:
        doc = load_document(row.text, source=f"{row.name} v{row.version}")
        DocumentWorkflow(doc)
    except InvalidInput as exc:
        log.warning("workflows.user_document_skipped", problem=exc.message)
        return None
    return Offered(doc.name, doc.description, doc)


async def misspelt(services: Services, user_id: uuid.UUID, name: str) -> tuple[str, list[str]]:
    """What to say of a workflow `name` that neither the server nor the user has: the
    sentence (with "did you mean …?" when a name offered is close), and those close names."""
    async with services.db.connection() as conn:
        mine = [row.name for row in await user_workflows.latest(conn, user_id)]
    offered = [w.name for w in services.workflows.all()] + mine
    close = difflib.get_close_matches(name, offered, n=3, cutoff=0.6)
    meant = " or ".join(repr(c) for c in close)
    return f"no workflow named {name!r}" + (f"; did you mean {meant}?" if close else "."), close
