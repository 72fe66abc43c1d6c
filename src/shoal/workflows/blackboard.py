"""A document workflow's blackboard, read from its subtasks: every entry with each revision
(`GET /api/v1/tasks/{id}/state`'s `entries`), and the task's state in one view (seed 001's
`AgentState`: its `state`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import jsonschema

from shoal.engine import answers
from shoal.engine.model import SubtaskRecord
from shoal.states import SubtaskStatus
from shoal.workflows.document import DocStepKind, StepDoc, WorkflowDocument


def blackboard(doc: WorkflowDocument,
               subtasks: Iterable[SubtaskRecord]) -> dict[str, list[dict[str, Any]]]:
    """Every entry of a task's blackboard with each of its revisions, oldest first: the value
    (a checked answer, the text, or for a map step the list of its items' values), the step
    and runs that wrote it, and when the last of them completed."""
    subs = list(subtasks)
    entries: dict[str, list[dict[str, Any]]] = {}
    for doc_step in doc.steps:
        done = [r for r in rounds_in(subs, doc_step.id) if whole(r)]
        if not done:
            continue
        entries[doc_step.entry] = [
            {"revision": n, "step": doc_step.id, "value": entry_value(doc_step, runs),
             "subtask_ids": [str(r.id) for r in runs],
             "completed_at": max((r.completed_at for r in runs if r.completed_at),
                                 default=None)}
            for n, runs in enumerate(done, start=1)]
    return entries


def rounds_in(subtasks: Iterable[SubtaskRecord], step_id: str) -> list[list[SubtaskRecord]]:
    """The rounds of a step, oldest first: each its run, or its runs one per item."""
    prefix = f"{step_id}#"
    by_seq: dict[int, list[SubtaskRecord]] = {}
    for s in subtasks:
        if s.key.startswith(prefix):
            by_seq.setdefault(s.options.seq or 0, []).append(s)
    return [sorted(by_seq[seq], key=item_order) for seq in sorted(by_seq)]


def entry_value(doc_step: StepDoc, runs: list[SubtaskRecord]) -> Any:
    """A round's value: its answer; for a map step, its items' answers in order; for an
    expand step, its planned subtasks' answers in plan order (not the plan); for a step that
    asks, its last turn's answer (the conversation before it is in its runs)."""
    if doc_step.kind is DocStepKind.EXPAND:
        return [answer_of(s) for s in runs if "." in s.key]
    if doc_step.asks is not None:
        return answer_of(max(runs, key=item_order))
    values = [answer_of(s) for s in runs]
    return values if doc_step.kind is DocStepKind.MAP else values[0]


def whole(runs: list[SubtaskRecord]) -> bool:
    """Whether every run of a round completed (an expand step's plan may have failed: its
    planned runs, made by the fallbacks, are the round)."""
    planned = any("." in s.key for s in runs)
    return all(s.status is SubtaskStatus.COMPLETED or (
        planned and "." not in s.key and s.status is SubtaskStatus.FAILED) for s in runs)


def round_seq(runs: list[SubtaskRecord]) -> int:
    return runs[0].options.seq or 0


def item_order(sub: SubtaskRecord) -> int:
    _, _, item = sub.key.partition(".")
    return int(item) if item.isdigit() else 0


def answer_of(sub: SubtaskRecord) -> Any:
    if sub.output is None:
        return None
    return sub.output.parsed if sub.output.answers else sub.output.text


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


def contract_problem(text: str, contract: Mapping[str, Any]) -> str | None:
    """Why `text` is not an answer that keeps `contract` (a JSON Schema), or None."""
    found = answers.find_json(text)
    if not found.found:
        return "the answer holds no JSON" + (f" ({found.error})" if found.error else "")
    error = jsonschema.exceptions.best_match(
        jsonschema.Draft202012Validator(contract).iter_errors(found.value))
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path)
    return f"{where or 'the answer'}: {error.message}"[:500]


def as_mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {"value": value}
