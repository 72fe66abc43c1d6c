"""The workflows Shoal runs, by name: each one a `shoal.engine.workflow.Workflow`.

`decide` applies an input to a task's state under the task's own workflow (`task.workflow`).
"""

from __future__ import annotations

from shoal.engine import graph
from shoal.engine.inputs import EngineInput
from shoal.engine.model import TaskState
from shoal.engine.step import Context, Decision
from shoal.engine.workflow import Workflow
from shoal.errors import InvalidInput
from shoal.workflows.dag import DagWorkflow

REGISTRY: dict[str, Workflow] = {flow.name: flow for flow in (DagWorkflow(),)}


def workflow_for(name: str) -> Workflow:
    """The workflow registered as `name`."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise InvalidInput(f"Unknown workflow {name!r}: use one of {', '.join(REGISTRY)}.",
                           details={"field": "workflow"}) from None


def decide(state: TaskState, inp: EngineInput, ctx: Context) -> Decision:
    """Apply one input to one task's state, under the task's workflow."""
    return graph.decide(workflow_for(state.task.workflow), state, inp, ctx)
