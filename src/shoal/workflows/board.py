"""What a document's runs read (`DocumentWorkflow` builds on this): its steps' rounds, the
blackboard's entries and their revisions, the task's parameters, and prompts rendered from them.

Each entry is its writer step's latest whole round: a run's checked answer or text, or the list
of a map or expand round's answers in item order.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from shoal.engine.model import SubtaskRecord, TaskRecord
from shoal.engine.step import Step
from shoal.workflows.blackboard import entry_value, rounds_in, whole
from shoal.workflows.document import (
    BuiltinRole,
    DocStepKind,
    Loop,
    Role,
    StepDoc,
    WorkflowDocument,
    ancestors,
)

_PLACEHOLDER = re.compile(r"\{([a-zA-Z_][a-zA-Z0-9_]*)((?:\.[a-zA-Z0-9_]+)*)\}")
MAX_ENTRY_CHARS = 12_000  # of one blackboard entry in a prompt
MAX_CONTEXT_CHARS = 60_000  # of `{context}`, every earlier entry


class Board:
    """A document's steps by id, by the entry they write, by the loops and routes they are in,
    and how a task's subtasks read as that document's rounds and entries."""

    def __init__(self, doc: WorkflowDocument) -> None:
        self.doc = doc
        self.name = doc.name
        self.description = doc.description
        self._steps = {s.id: s for s in doc.steps}
        self._step_ids = [s.id for s in doc.steps]
        self._writer = {s.entry: s for s in doc.steps}
        self._loops_from: dict[str, list[Loop]] = {}
        for loop in doc.loops:
            self._loops_from.setdefault(loop.source, []).append(loop)
        self._routes = [s for s in doc.steps if s.kind is DocStepKind.ROUTE]
        self._route_of = {name: r for r in self._routes
                          for name in (*r.choices, r.finish) if name is not None}
        after = {s.id: tuple(s.after) for s in doc.steps}
        self._before = {sid: ancestors(after, sid) for sid in after}  # what each comes after

    def _route_field(self, step: Step, route: StepDoc | None, name: str) -> str:
        raise NotImplementedError  # `RouteRuns`

    def _prompt(self, step: Step, doc_step: StepDoc, role: Role | None, feedback: str,
                item: str, conversation: str = "") -> str:
        """A run's prompt: its role's, rendered, and the answer's contract when it has one
        (not for a route, whose router answers `{"next": …}`). A built-in role's prompt is
        written at dispatch: this is what its run is about (a planned subtask's `item`)."""
        if role is not None and role.builtin is BuiltinRole.PLANNER:
            return "Decompose the task into subtasks."
        if role is not None and role.builtin is BuiltinRole.CODER:
            return item or step.task.description
        template = role.prompt if role else ""
        prompt = self._render(step, doc_step, template, feedback, item, conversation)
        if conversation and "{conversation}" not in template:
            prompt += "\n\nThe conversation so far:\n" + conversation
        if role is not None and role.output is not None and doc_step.kind is not \
                DocStepKind.ROUTE:
            prompt += ("\n\nAnswer with only a JSON value that matches this JSON Schema:\n"
                       + json.dumps(role.output, indent=1))
        return prompt

    def _rounds(self, step: Step, step_id: str) -> list[list[SubtaskRecord]]:
        """A step's rounds (read, never changed: kept until a subtask changes)."""
        found: list[list[SubtaskRecord]] | None = step.derived.get(("rounds", step_id))
        if found is None:
            found = step.derived[("rounds", step_id)] = rounds_in(step.subtasks.values(),
                                                                  step_id)
        return found

    def _round(self, step: Step, sub: SubtaskRecord) -> list[SubtaskRecord]:
        """The runs of the round `sub` belongs to."""
        prefix = sub.key.split("#", 1)[0] + "#"
        return [s for s in step.subtasks.values()
                if s.key.startswith(prefix) and s.options.seq == sub.options.seq]

    def _latest(self, step: Step, entry: str) -> list[SubtaskRecord] | None:
        writer = self._writer.get(entry)
        if writer is None:
            return None
        done = [r for r in self._rounds(step, writer.id) if whole(r)]
        return done[-1] if done else None

    def _revision(self, step: Step, doc_step: StepDoc) -> int:
        return sum(1 for r in self._rounds(step, doc_step.id) if whole(r))

    def _revision_of(self, step: Step) -> Callable[[StepDoc, SubtaskRecord], int | None]:
        """The blackboard revision a run's round is (None: its round is not whole)."""
        def revision(doc_step: StepDoc, sub: SubtaskRecord) -> int | None:
            n = 0
            for runs in self._rounds(step, doc_step.id):
                n += whole(runs)
                if runs[0].options.seq == sub.options.seq:
                    return n if whole(runs) else None
            return None
        return revision

    def _value(self, step: Step, entry: str, path: str) -> Any:
        """An entry's latest revision: its checked answer if it has one, else its text; or a
        field of the answer along `path` (`verdict`, `a.b`)."""
        latest = self._latest(step, entry)
        if latest is None:
            return None
        value = entry_value(self._writer[entry], latest)
        for part in filter(None, path.split(".")):
            value = value.get(part) if isinstance(value, Mapping) else None
        return value

    def _entry(self, step: Step, entry: str, path: str) -> str:
        value = self._value(step, entry, path)
        if value is None:
            return ""
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        if len(text) > 120 and not isinstance(value, str):  # one line when short, else laid out
            text = json.dumps(value, indent=1, ensure_ascii=False)
        return text[:MAX_ENTRY_CHARS]

    def _parameter(self, task: TaskRecord, name: str) -> Any:
        if name in task.meta.parameters:
            return task.meta.parameters[name]
        return self.doc.parameters[name].default

    def _render(self, step: Step, doc_step: StepDoc, template: str, feedback: str,
                item: str, conversation: str = "") -> str:
        route = doc_step if doc_step.kind is DocStepKind.ROUTE else (
            self._route_of.get(doc_step.id) or next(iter(self._routes), None))

        def fill(match: re.Match[str]) -> str:
            name, path = match.group(1), match.group(2).lstrip(".")
            if name == "query":
                return step.task.description
            if name in ("execution_order", "agent_outputs", "allowed"):
                return self._route_field(step, route, name)
            if name == "feedback":
                return feedback
            if name == "item":
                return item
            if name == "conversation":
                return conversation
            if name == "context":
                return self._context(step, doc_step)
            if name in self.doc.parameters:
                return str(self._parameter(step.task, name))
            if name in self._writer:
                return self._entry(step, name, path)
            return match.group(0)
        return _PLACEHOLDER.sub(fill, template)

    def _context(self, step: Step, doc_step: StepDoc) -> str:
        """`{context}`: every entry written by a step `doc_step` comes after, in the
        document's order, each under its name (seed 003's context injection)."""
        parts = [f"## {s.entry}\n{text}" for s in self.doc.steps
                 if s.id in self._before[doc_step.id]
                 and (text := self._entry(step, s.entry, ""))]
        return "\n\n".join(parts)[:MAX_CONTEXT_CHARS]

    def _step_of(self, sub: SubtaskRecord) -> StepDoc:
        return self._steps[sub.key.split("#", 1)[0]]

    def _cap(self, task: TaskRecord, cap: int | str) -> int:
        return cap if isinstance(cap, int) else int(self._parameter(task, cap.strip("{}")))
