"""Workflows: the ones this control plane runs, and the schema of workflow documents."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel

from shoal.api.deps import ServicesDep, UserDep
from shoal.api.errors import error_responses
from shoal.errors import NotFound
from shoal.workflows.document import WorkflowDocument

router = APIRouter(prefix="/api/v1/workflows", tags=["workflows"],
                   responses=error_responses(401, 404, 413, 422, 429))


class WorkflowPublic(BaseModel):
    """A workflow a task may name in `workflow`; `document` for one written as data."""

    name: str
    description: str
    document: dict[str, Any] | None = None


class WorkflowList(BaseModel):
    workflows: list[WorkflowPublic]


@router.get("", response_model=WorkflowList)
async def list_workflows(user: UserDep, services: ServicesDep) -> WorkflowList:
    """Every workflow a task may run."""
    return WorkflowList(workflows=[WorkflowPublic(name=w.name, description=w.description)
                                   for w in services.workflows.all()])


@router.get("/schema")
async def document_schema(user: UserDep) -> dict[str, Any]:
    """The JSON Schema of workflow documents (YAML files checked by `shoal workflows check`)."""
    return WorkflowDocument.model_json_schema(by_alias=True)


@router.get("/{name}", response_model=WorkflowPublic)
async def get_workflow(name: str, user: UserDep, services: ServicesDep) -> WorkflowPublic:
    """One workflow, by name, with its document if it is written as data."""
    offered = services.workflows.get(name)
    if offered is None:
        raise NotFound("No workflow of that name; GET /api/v1/workflows lists them.")
    document = (offered.document.model_dump(mode="json", by_alias=True)
                if offered.document is not None else None)
    return WorkflowPublic(name=offered.name, description=offered.description,
                          document=document)
