"""Workflows: the ones this control plane runs, the ones users add, and the schema of
workflow documents."""

from __future__ import annotations

from typing import Any

import structlog
from fastapi import APIRouter, Response
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, Field

from shoal.api.catalog import misspelt, offered_to, stored_offer
from shoal.api.deps import ServicesDep, UserDep
from shoal.api.errors import error_responses
from shoal.api.schemas.base import Strict
from shoal.errors import Conflict, InvalidInput, NotFound
from shoal.store import user_workflows
from shoal.store.models import utcnow
from shoal.workflows import Offered
from shoal.workflows.document import WorkflowDocument
from shoal.workflows.interpreter import DocumentWorkflow
from shoal.workflows.loading import load_document

log = structlog.get_logger(__name__)
MAX_DOCUMENT = 200_000  # characters of a document sent to POST /api/v1/workflows

router = APIRouter(prefix="/api/v1/workflows", tags=["workflows"],
                   responses=error_responses(401, 404, 413, 422, 429))


class WorkflowPublic(BaseModel):
    """A workflow a task may name in `workflow`: its version, its document (not in the list of
    the server's), and `yours` for one you added."""

    name: str
    description: str
    document: dict[str, Any] | None = None
    version: int
    yours: bool = False


class WorkflowList(BaseModel):
    workflows: list[WorkflowPublic]


class WorkflowCreate(Strict):
    """`POST /api/v1/workflows`: a workflow document of your own."""

    document: str = Field(min_length=1, max_length=MAX_DOCUMENT, description=(
        "The document in YAML (JSON is YAML too), as `shoal workflows check` reads it."))


@router.get("", response_model=WorkflowList)
async def list_workflows(user: UserDep, services: ServicesDep) -> WorkflowList:
    """Every workflow a task of yours may run: the server's, then yours."""
    async with services.db.connection() as conn:
        rows = await user_workflows.latest(conn, user.user_id)
    return WorkflowList(workflows=[
        *(WorkflowPublic(name=w.name, description=w.description, version=w.document.version)
          for w in services.workflows.all()),
        *(_public(offered, yours=True) for offered in map(stored_offer, rows)
          if offered is not None)])


@router.post("", status_code=201, response_model=WorkflowPublic,
             responses=error_responses(409))
async def add_workflow(body: WorkflowCreate, user: UserDep,
                       services: ServicesDep) -> WorkflowPublic:
    """Add a workflow document (or a new version of one of yours; raise its `version`). Only
    you see it. A task pins the version it started with, so a new version never changes a
    running task."""
    try:
        doc = load_document(body.document, source="document")
        DocumentWorkflow(doc)
    except InvalidInput as exc:
        raise RequestValidationError([{"loc": ("body", "document"), "msg": exc.message,
                                       "type": "value_error"}]) from None
    if services.workflows.get(doc.name) is not None:
        raise Conflict(f"'{doc.name}' is a workflow of this server; name yours otherwise.",
                       code="workflow_exists")
    async with services.db.begin() as conn:
        mine = await user_workflows.latest(conn, user.user_id, doc.name)
        if mine and mine[0].version >= doc.version:
            raise Conflict(f"You have version {mine[0].version} of '{doc.name}'; give the new "
                           f"one a higher `version`.", code="version_exists")
        await user_workflows.add(conn, user_id=user.user_id, name=doc.name,
                                 version=doc.version, text=body.document, now=utcnow())
    return _public(Offered(doc.name, doc.description, doc), yours=True)


@router.get("/schema")
async def document_schema(user: UserDep) -> dict[str, Any]:
    """The JSON Schema of workflow documents (YAML files checked by `shoal workflows check`)."""
    return WorkflowDocument.model_json_schema(by_alias=True)


@router.get("/{name}", response_model=WorkflowPublic)
async def get_workflow(name: str, user: UserDep, services: ServicesDep) -> WorkflowPublic:
    """One workflow, by name, with its document if it is written as data."""
    offered = await offered_to(services, user.user_id, name)
    if offered is None:
        said, close = await misspelt(services, user.user_id, name)
        raise NotFound(f"{said[0].upper()}{said[1:]} GET /api/v1/workflows lists them.",
                       details={"did_you_mean": close})
    return _public(offered, yours=services.workflows.get(name) is None)


@router.delete("/{name}", status_code=204, responses=error_responses(409))
async def delete_workflow(name: str, user: UserDep, services: ServicesDep) -> Response:
    """Remove a workflow of yours, every version (tasks that run one keep their copy)."""
    if services.workflows.get(name) is not None:
        raise Conflict(f"'{name}' is a workflow of this server, not yours to remove.",
                       code="not_yours")
    async with services.db.begin() as conn:
        if not await user_workflows.remove(conn, user.user_id, name):
            raise NotFound("No workflow of yours has that name.")
    return Response(status_code=204)


def _public(offered: Offered, *, yours: bool) -> WorkflowPublic:
    doc = offered.document
    return WorkflowPublic(name=offered.name, description=offered.description,
                          document=doc.model_dump(mode="json", by_alias=True),
                          version=doc.version, yours=yours)
