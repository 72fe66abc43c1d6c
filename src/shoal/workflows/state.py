"""A document workflow's state in one view (seed 001's `AgentState`): what `GET
/api/v1/tasks/{id}/state` answers beside the blackboard's entries."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from shoal.engine.model import SubtaskRecord
from shoal.states import SubtaskStatus
from shoal.workflows.document import DocStepKind, WorkflowDocument
from shoal.workflows.interpreter import blackboard


def state_view(doc: WorkflowDocument, query: str,
               subtasks: Iterable[SubtaskRecord]) -> dict[str, Any]:
    """`query`; `messages`, every completed run's answer in the order they completed;
    `response`, the latest revision of the document's `result` entry; and for a document with
    a route: its `plan`, `execution_order` (the steps it picked, in order), `agent_outputs`
    (their latest answers) and `summary` (what its finish step wrote)."""
    subs = list(subtasks)
    entries = blackboard(doc, subs)
    latest = {name: revisions[-1]["value"] for name, revisions in entries.items()}
    done = sorted((s for s in subs if s.status is SubtaskStatus.COMPLETED and s.output),
                  key=lambda s: (s.completed_at is None, s.completed_at, s.options.seq or 0))
    view: dict[str, Any] = {
        "query": query,
        "messages": [{"role": "user", "content": query}] + [
            {"role": s.role, "step": s.key, "content": s.output.text}
            for s in done if s.output is not None],
        "response": latest.get(doc.result_entry),
    }
    route = next((s for s in doc.steps if s.kind is DocStepKind.ROUTE), None)
    if route is None:
        return view
    steps = {s.id: s for s in doc.steps}
    order = [s.key.split("#", 1)[0] for s in done if s.key.split("#", 1)[0] in route.choices]
    view |= {
        "plan": latest.get((route.plan or "").split(".")[0]),
        "execution_order": order,
        "agent_outputs": {name: latest.get(steps[name].entry) for name in dict.fromkeys(order)},
        "summary": latest.get(steps[route.finish].entry) if route.finish else None,
    }
    return view
