"""The workflows Shoal runs: workflow documents (`document.py`) run by the one interpreter
(`interpreter.py`). The built-in ones (`builtin/*.yaml`: `dag`, `pipeline`, `supervisor`) ship
with Shoal; users add their own (a folder, or `POST /api/v1/workflows`).

A task pins the document it started with (`TaskMeta.workflow`), so editing or removing a
document never changes a running task. `decide` applies an input to a task's state under the
task's own workflow.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from shoal.engine import graph
from shoal.engine.inputs import EngineInput
from shoal.engine.model import TaskRecord, TaskState
from shoal.engine.step import Context, Decision
from shoal.engine.workflow import Workflow
from shoal.errors import InvalidInput
from shoal.workflows.consistency import problems
from shoal.workflows.document import BUILTIN_FIELDS, DocStepKind, Role, StepDoc, WorkflowDocument
from shoal.workflows.interpreter import DocumentWorkflow
from shoal.workflows.loading import DocumentError, load_document


def _builtin() -> dict[str, WorkflowDocument]:
    folder = resources.files("shoal.workflows").joinpath("builtin")
    found = (load_document(f.read_text(encoding="utf-8"), source=f"builtin/{f.name}")
             for f in sorted(folder.iterdir(), key=lambda f: f.name) if f.name.endswith(".yaml"))
    return {doc.name: doc for doc in found}


BUILTIN: dict[str, WorkflowDocument] = _builtin()
"""The documents that ship with Shoal, by name (a broken one fails the import: a bug)."""

REGISTRY: dict[str, Workflow] = {name: DocumentWorkflow(doc) for name, doc in BUILTIN.items()}
"""The built-in workflows, run: for a task that pinned no document (the runtime's own)."""

_PINNED: OrderedDict[Any, DocumentWorkflow] = OrderedDict()  # task id → its document, run
_PINNED_MAX = 1024


def workflow_for(task: TaskRecord) -> Workflow:
    """The workflow `task` runs: the document it pinned, else the built-in of its name."""
    if task.meta.workflow is None:
        flow = REGISTRY.get(task.workflow)
        if flow is None:
            raise InvalidInput(f"Unknown workflow {task.workflow!r}.",
                               details={"field": "workflow"})
        return flow
    found = _PINNED.get(task.id)
    if found is None:
        found = DocumentWorkflow(WorkflowDocument.model_validate(task.meta.workflow))
        _PINNED[task.id] = found
        if len(_PINNED) > _PINNED_MAX:
            _PINNED.popitem(last=False)
    return found


def decide(state: TaskState, inp: EngineInput, ctx: Context) -> Decision:
    """Apply one input to one task's state, under the task's workflow."""
    return graph.decide(workflow_for(state.task), state, inp, ctx)


@dataclass(frozen=True, slots=True)
class Offered:
    """A workflow a task may name, with its document."""

    name: str
    description: str
    document: WorkflowDocument


class Catalog:
    """The workflows offered to users: the built-in ones and the documents given that can run
    (none taking a built-in's name)."""

    def __init__(self, documents: Iterable[WorkflowDocument] = ()) -> None:
        self._offered: dict[str, Offered] = {}
        for doc in [*BUILTIN.values(), *documents]:
            if doc.name not in self._offered:
                self._offered[doc.name] = Offered(doc.name, doc.description, doc)

    @classmethod
    def from_texts(cls, texts: Iterable[tuple[str, str]]) -> tuple[Catalog, list[str]]:
        """A catalog of the built-ins and the documents in `texts` (source, YAML), and why the
        others are not in it (file, line, field)."""
        documents: list[WorkflowDocument] = []
        problems: list[str] = []
        for source, text in texts:
            try:
                doc = load_document(text, source=source)
                DocumentWorkflow(doc)
            except (DocumentError, InvalidInput) as exc:
                problems.append(exc.message)
                continue
            if doc.name in BUILTIN or any(d.name == doc.name for d in documents):
                problems.append(f"{source}: a workflow named '{doc.name}' exists already.")
                continue
            documents.append(doc)
        return cls(documents), problems

    def all(self) -> list[Offered]:
        return list(self._offered.values())

    def get(self, name: str) -> Offered | None:
        return self._offered.get(name)


def checked_parameters(doc: WorkflowDocument, given: Mapping[str, Any] | None) -> dict[str, Any]:
    """Every parameter of `doc`: the given value, checked, or the default; `InvalidInput`
    naming `parameters.<name>` otherwise."""
    given = dict(given or {})
    unknown = sorted(set(given) - set(doc.parameters))
    if unknown:
        raise InvalidInput(f"workflow '{doc.name}' has no parameter '{unknown[0]}'; it has: "
                           f"{', '.join(doc.parameters) or 'none'}",
                           details={"field": f"parameters.{unknown[0]}"})
    values: dict[str, Any] = {}
    for name, param in doc.parameters.items():
        try:
            values[name] = param.check(given[name]) if name in given else param.default
        except ValueError as exc:
            raise InvalidInput(str(exc),
                               details={"field": f"parameters.{name}"}) from None
    return values


@dataclass(frozen=True, slots=True)
class Insert:
    """A role of a user's own to run right after the step `after` (one that `allows_insert`)."""

    after: str
    id: str
    prompt: str
    tools: tuple[str, ...] = ()


def with_inserted(doc: WorkflowDocument, inserts: Sequence[Insert]) -> WorkflowDocument:
    """`doc` with each inserted role run right after its step: the steps that came after that
    one come after the inserted one, and their prompts end with its notes. `InvalidInput`
    names `insert.<i>.<field>` when one cannot go where it asks."""
    for i, ins in enumerate(inserts):
        steps = {s.id: s for s in doc.steps}
        target = steps.get(ins.after)
        if target is None or not target.allows_insert:
            where = ", ".join(s.id for s in doc.steps if s.allows_insert) or "none"
            raise InvalidInput(f"step '{ins.after}' takes no inserted role; the steps that do: "
                               f"{where}", details={"field": f"insert.{i}.after"})
        taken = {*steps, *doc.roles, *doc.parameters, *(s.entry for s in doc.steps),
                 *BUILTIN_FIELDS}
        if ins.id in taken:
            raise InvalidInput(f"'{ins.id}' names a step, role, entry or parameter of "
                               f"'{doc.name}' already", details={"field": f"insert.{i}.id"})
        doc = _inserted(doc, ins)
        for path, message in problems(doc):
            field = "prompt" if path[:2] == ("roles", ins.id) else "after"
            raise InvalidInput(message, details={"field": f"insert.{i}.{field}"})
    return doc


def _inserted(doc: WorkflowDocument, ins: Insert) -> WorkflowDocument:
    notes = f"\n\nNotes from {ins.id} (a role the user added):\n{{{ins.id}}}"
    roles = {**doc.roles, ins.id: Role(prompt=ins.prompt, tools=list(ins.tools))}
    steps: list[StepDoc] = []
    for step in doc.steps:
        if ins.after in step.after:
            step = step.model_copy(update={"after": [ins.id if a == ins.after else a
                                                     for a in step.after]})
            if step.role is not None and roles[step.role].builtin is None and \
                    notes not in roles[step.role].prompt:
                roles[step.role] = roles[step.role].model_copy(
                    update={"prompt": roles[step.role].prompt + notes})
        steps.append(step)
        if step.id == ins.after:
            steps.append(StepDoc(id=ins.id, kind=DocStepKind.AGENT, role=ins.id,
                                 after=[ins.after]))
    return doc.model_copy(update={"roles": roles, "steps": steps})


def checked_skip(doc: WorkflowDocument, skip: Iterable[str] | None) -> frozenset[str]:
    """The steps to switch off, each an optional step of `doc`; `InvalidInput` naming
    `skip.<i>` otherwise."""
    steps = {s.id: s for s in doc.steps}
    for i, name in enumerate(skip or ()):
        if name not in steps:
            raise InvalidInput(f"workflow '{doc.name}' has no step '{name}'",
                               details={"field": f"skip.{i}"})
        if not steps[name].optional:
            optional = ", ".join(s.id for s in doc.steps if s.optional) or "none"
            raise InvalidInput(f"step '{name}' cannot be skipped; the optional ones are: "
                               f"{optional}", details={"field": f"skip.{i}"})
    return frozenset(skip or ())


__all__ = ["BUILTIN", "REGISTRY", "Catalog", "Insert", "Offered", "checked_parameters",
           "checked_skip", "decide", "with_inserted", "workflow_for"]
