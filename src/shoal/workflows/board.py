"""What a document's runs read (`Board`, which every step kind's handler is given): its steps'
rounds, the blackboard's entries and their revisions, the task's parameters, a route's state,
and prompts rendered from them. It reads a `Step` and changes nothing.

Each entry is its writer step's latest whole round: a run's checked answer or text, or the list
of a map or expand round's answers in item order.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from shoal.engine.model import SubtaskRecord, TaskRecord
from shoal.engine.step import Step
from shoal.states import TERMINAL_SUBTASK, SubtaskStatus
from shoal.workflows import routing
from shoal.workflows.blackboard import entry_value, round_seq, rounds_in, whole
from shoal.workflows.consistency import ancestors
from shoal.workflows.document import BuiltinRole, DocStepKind, Loop, Role, StepDoc, WorkflowDocument
from shoal.workflows.routing import RouteState

_PLACEHOLDER = re.compile(r"\{([a-zA-Z_][a-zA-Z0-9_]*)((?:\.[a-zA-Z0-9_]+)*)\}")
MAX_ENTRY_CHARS = 12_000  # of one blackboard entry in a prompt
MAX_CONTEXT_CHARS = 60_000  # of `{context}`, every earlier entry
MAX_FIELD_CHARS = 12_000  # of `{agent_outputs}` in a prompt


class Board:
    """A document's steps by id, by the entry they write, by the loops and routes they are in,
    and how a task's subtasks read as that document's rounds and entries."""

    def __init__(self, doc: WorkflowDocument) -> None:
        self.doc = doc
        self.steps = {s.id: s for s in doc.steps}
        self.step_ids = [s.id for s in doc.steps]
        self.writer = {s.entry: s for s in doc.steps}
        self.loops_from: dict[str, list[Loop]] = {}
        for loop in doc.loops:
            self.loops_from.setdefault(loop.source, []).append(loop)
        self.routes = [s for s in doc.steps if s.kind is DocStepKind.ROUTE]
        self.route_of = {name: r for r in self.routes
                         for name in (*r.choices, r.finish) if name is not None}
        after = {s.id: tuple(s.after) for s in doc.steps}
        self.before = {sid: ancestors(after, sid) for sid in after}  # what each comes after

    def route_state(self, step: Step, route: StepDoc) -> RouteState:
        """What `route` planned, which of its choices ran, and which failed."""
        plan = None
        if route.plan is not None:
            entry, _, path = route.plan.partition(".")
            plan = self.value(step, entry, path)
        runs = sorted((s for s in step.subtasks.values()
                       if s.key.split("#", 1)[0] in route.choices),
                      key=lambda s: s.options.seq or 0)
        latest = {s.key.split("#", 1)[0]: s.status for s in runs}
        return RouteState(
            planned=routing.planned_choices(route, plan),
            ran=tuple(s.key.split("#", 1)[0] for s in runs
                      if s.status is SubtaskStatus.COMPLETED),
            failed=frozenset(n for n, st in latest.items() if st is SubtaskStatus.FAILED))

    def allowed(self, step: Step, route: StepDoc) -> list[str]:
        """What the router may name now: the choices that may run, then the finish."""
        return [*routing.allowed(route, self.route_state(step, route)), route.finish or ""]

    def route_field(self, step: Step, route: StepDoc | None, name: str) -> str:
        if route is None:
            return ""
        state = self.route_state(step, route)
        if name == "allowed":
            return ", ".join(self.allowed(step, route))
        if name == "execution_order":
            return ", ".join(state.ran) or "(nothing has run yet)"
        outputs = [(n, self.value(step, self.steps[n].entry, ""))
                   for n in dict.fromkeys(state.ran)]
        return routing.describe(outputs)[:MAX_FIELD_CHARS] or "(none yet)"

    def prompt(self, step: Step, doc_step: StepDoc, role: Role | None, feedback: str,
               item: str, conversation: str = "") -> str:
        """A run's prompt: its role's, rendered, and the answer's contract when it has one
        (not for a route, whose router answers `{"next": …}`). A built-in role's prompt is
        written at dispatch: this is what its run is about (a planned subtask's `item`)."""
        if role is not None and role.builtin is BuiltinRole.PLANNER:
            return "Decompose the task into subtasks."
        if role is not None and role.builtin is BuiltinRole.CODER:
            return item or step.task.description
        template = role.prompt if role else ""
        prompt = self.render(step, doc_step, template, feedback, item, conversation)
        if conversation and "{conversation}" not in template:
            prompt += "\n\nThe conversation so far:\n" + conversation
        if role is not None and role.output is not None and doc_step.kind is not \
                DocStepKind.ROUTE:
            prompt += ("\n\nAnswer with only a JSON value that matches this JSON Schema:\n"
                       + json.dumps(role.output, indent=1))
        return prompt

    def rounds(self, step: Step, step_id: str) -> list[list[SubtaskRecord]]:
        """A step's rounds (read, never changed: kept until a subtask changes)."""
        found: list[list[SubtaskRecord]] | None = step.derived.get(("rounds", step_id))
        if found is None:
            found = step.derived[("rounds", step_id)] = rounds_in(step.subtasks.values(),
                                                                  step_id)
        return found

    def same_round(self, step: Step, sub: SubtaskRecord) -> list[SubtaskRecord]:
        """The runs of the round `sub` belongs to."""
        prefix = sub.key.split("#", 1)[0] + "#"
        return [s for s in step.subtasks.values()
                if s.key.startswith(prefix) and s.options.seq == sub.options.seq]

    def latest(self, step: Step, entry: str) -> list[SubtaskRecord] | None:
        writer = self.writer.get(entry)
        if writer is None:
            return None
        done = [r for r in self.rounds(step, writer.id) if whole(r)]
        return done[-1] if done else None

    def revision(self, step: Step, doc_step: StepDoc) -> int:
        return sum(1 for r in self.rounds(step, doc_step.id) if whole(r))

    def revision_of(self, step: Step) -> Callable[[StepDoc, SubtaskRecord], int | None]:
        """The blackboard revision a run's round is (None: its round is not whole)."""
        def revision(doc_step: StepDoc, sub: SubtaskRecord) -> int | None:
            n = 0
            for runs in self.rounds(step, doc_step.id):
                n += whole(runs)
                if runs[0].options.seq == sub.options.seq:
                    return n if whole(runs) else None
            return None
        return revision

    def value(self, step: Step, entry: str, path: str) -> Any:
        """An entry's latest revision: its checked answer if it has one, else its text; or a
        field of the answer along `path` (`verdict`, `a.b`)."""
        latest = self.latest(step, entry)
        if latest is None:
            return None
        value = entry_value(self.writer[entry], latest)
        for part in filter(None, path.split(".")):
            value = value.get(part) if isinstance(value, Mapping) else None
        return value

    def entry(self, step: Step, entry: str, path: str) -> str:
        value = self.value(step, entry, path)
        if value is None:
            return ""
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        if len(text) > 120 and not isinstance(value, str):  # one line when short, else laid out
            text = json.dumps(value, indent=1, ensure_ascii=False)
        return text[:MAX_ENTRY_CHARS]

    def parameter(self, task: TaskRecord, name: str) -> Any:
        if name in task.meta.parameters:
            return task.meta.parameters[name]
        return self.doc.parameters[name].default

    def render(self, step: Step, doc_step: StepDoc, template: str, feedback: str,
                item: str, conversation: str = "") -> str:
        route = doc_step if doc_step.kind is DocStepKind.ROUTE else (
            self.route_of.get(doc_step.id) or next(iter(self.routes), None))

        def fill(match: re.Match[str]) -> str:
            name, path = match.group(1), match.group(2).lstrip(".")
            if name == "query":
                return step.task.description
            if name in ("execution_order", "agent_outputs", "allowed"):
                return self.route_field(step, route, name)
            if name == "feedback":
                return feedback
            if name == "item":
                return item
            if name == "conversation":
                return conversation
            if name == "context":
                return self.context(step, doc_step)
            if name in self.doc.parameters:
                return str(self.parameter(step.task, name))
            if name in self.writer:
                return self.entry(step, name, path)
            return match.group(0)
        return _PLACEHOLDER.sub(fill, template)

    def context(self, step: Step, doc_step: StepDoc) -> str:
        """`{context}`: every entry written by a step `doc_step` comes after, in the
        document's order, each under its name (seed 003's context injection)."""
        parts = [f"## {s.entry}\n{text}" for s in self.doc.steps
                 if s.id in self.before[doc_step.id]
                 and (text := self.entry(step, s.entry, ""))]
        return "\n\n".join(parts)[:MAX_CONTEXT_CHARS]

    def step_of(self, sub: SubtaskRecord) -> StepDoc:
        return self.steps[sub.key.split("#", 1)[0]]

    def cap(self, task: TaskRecord, cap: int | str) -> int:
        return cap if isinstance(cap, int) else int(self.parameter(task, cap.strip("{}")))

    def switch(self, task: TaskRecord, value: bool | str) -> bool:
        """A document's on/off setting: itself, or the task's parameter it names."""
        return bool(value if isinstance(value, bool) else self.parameter(
            task, value.strip("{}")))

    # ---- what may start -----------------------------------------------------------------------

    def after(self, step: Step, doc_step: StepDoc) -> list[str]:
        """The steps `doc_step` waits for: its `after`, a step the user skipped replaced by
        the steps that one waits for."""
        skip = step.task.meta.skip
        found: list[str] = []
        for dep in doc_step.after:
            for sid in (self.after(step, self.steps[dep]) if dep in skip else [dep]):
                if sid not in found:
                    found.append(sid)
        return found

    def ready(self, step: Step, doc_step: StepDoc) -> bool:
        """Whether a new round of `doc_step` may start: every step it comes after has a whole
        round newer than its own last one (a routed step runs when its route picks it)."""
        if doc_step.id in step.task.meta.skip or doc_step.id in self.route_of:
            return False
        if doc_step.kind is DocStepKind.ROUTE and doc_step.finish in step.task.meta.skip:
            return False
        rounds = self.rounds(step, doc_step.id)
        if doc_step.kind is DocStepKind.ROUTE and (
                rounds or self.rounds(step, doc_step.finish or "")):
            return False  # it started: its later decisions follow the steps it picks
        if rounds and any(s.status not in TERMINAL_SUBTASK for s in rounds[-1]):
            return False
        after = self.after(step, doc_step)
        if not after:
            return not rounds
        newest = 0
        for dep in after:
            last = self.rounds(step, dep)[-1:]
            if not last or not whole(last[0]) or any(s.options.looped for s in last[0]):
                return False
            newest = max(newest, round_seq(last[0]))
        return not rounds or newest > round_seq(rounds[-1])

    def deps(self, step: Step, doc_step: StepDoc) -> tuple[uuid.UUID, ...]:
        """The runs a new round of `doc_step` comes after: the latest of each step it waits
        for (of a step that asks, its last turn: the answer)."""
        return tuple(s.id for dep in self.after(step, doc_step)
                     for s in (self.rounds(step, dep)[-1][-1:] if self.steps[dep].asks
                               else self.rounds(step, dep)[-1]))
