"""Workflows: the ones this control plane runs, and the schema of workflow documents."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel

from shoal.api.deps import UserDep
from shoal.api.errors import error_responses
from shoal.errors import NotFound
from shoal.workflows import REGISTRY
from shoal.workflows.document import WorkflowDocument

router = APIRouter(prefix="/api/v1/workflows", tags=["workflows"],
                   responses=error_responses(401, 404, 413, 422, 429))


class WorkflowPublic(BaseModel):
    """A workflow a task may name in `workflow`."""

    name: str
    description: str


class WorkflowList(BaseModel):
    workflows: list[WorkflowPublic]


@router.get("", response_model=WorkflowList)
async def list_workflows(user: UserDep) -> WorkflowList:
    """Every workflow a task may run."""
    return WorkflowList(workflows=[WorkflowPublic(name=w.name, description=w.description)
                                   for w in REGISTRY.values()])


@router.get("/schema")
async def document_schema(user: UserDep) -> dict[str, Any]:
    """The JSON Schema of workflow documents (YAML files checked by `shoal workflows check`)."""
    return WorkflowDocument.model_json_schema(by_alias=True)


@router.get("/{name}", response_model=WorkflowPublic)
async def get_workflow(name: str, user: UserDep) -> WorkflowPublic:
    """One workflow, by name."""
    flow = REGISTRY.get(name)
    if flow is None:
        raise NotFound(f"No workflow of that name; there are: {', '.join(REGISTRY)}.")
    return WorkflowPublic(name=flow.name, description=flow.description)
