"""A workflow's message log: every hand-over between its agents and the person, as envelopes.

A hand-over is read from the task's runs, never stored apart from them: a run receives the
user's request (a run that waits for nothing), the output of each run it comes after (a
reference to the blackboard revision it read: `entry`, `revision`, `subtask_id`), the feedback
a loop carried back, a question its step's role asked (a `human` turn's, or a delegation's),
and a person's answer. `log` lists a task's envelopes in order (`GET
/api/v1/tasks/{id}/messages`); the interpreter announces each new run's as one `message`
event when it creates the run (`received`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from shoal.engine.model import StepKind, SubtaskRecord
from shoal.workflows.blackboard import item_order, rounds_in, whole
from shoal.workflows.document import DocStepKind, StepDoc, WorkflowDocument
from shoal.workflows.turns import question_of, said

USER = "user"  # the person who submitted the task
_NAMESPACE = uuid.UUID("5d1f6a52-8f0e-4d8e-9c55-6f6c1a3b7e20")
MAX_CONTENT_CHARS = 4_000


class MessageKind(StrEnum):
    REQUEST = "request"  # the user's task, to a run that waits for nothing
    OUTPUT = "output"  # a run's output, read by a run that comes after it
    FEEDBACK = "feedback"  # what a loop carried back to the step it reruns
    QUESTION = "question"  # a step's role asks the user
    ANSWER = "answer"  # the user's answer, back to the role that asked
    DELEGATION = "delegation"  # a step's role hands a sub-question to another role


@dataclass(frozen=True, slots=True)
class Envelope:
    """One hand-over: who handed what to whom, when (the receiving run's creation)."""

    id: uuid.UUID
    timestamp: datetime
    sender: str
    recipient: str
    kind: MessageKind
    subtask_id: uuid.UUID  # the run that receives it
    content: str | None = None  # what was said (a request, a question, an answer)
    entry: str | None = None  # or the blackboard entry read …
    revision: int | None = None  # … at this revision …
    source_subtask_id: uuid.UUID | None = None  # … written by this run

    def wire(self) -> dict[str, Any]:
        return {"id": str(self.id), "timestamp": self.timestamp.isoformat(),
                "sender": self.sender, "recipient": self.recipient, "kind": self.kind.value,
                "subtask_id": str(self.subtask_id), "content": self.content,
                "entry": self.entry, "revision": self.revision,
                "source_subtask_id": str(self.source_subtask_id)
                if self.source_subtask_id else None}


Revision = Callable[[StepDoc, SubtaskRecord], int | None]


def received(doc: WorkflowDocument, query: str, subtasks: Mapping[uuid.UUID, SubtaskRecord],
             sub: SubtaskRecord, revision: Revision) -> list[Envelope]:
    """The hand-overs run `sub` receives (`revision`: the blackboard revision a run's round
    is, once whole)."""
    steps = {s.id: s for s in doc.steps}
    mine = steps.get(sub.key.split("#", 1)[0])
    if mine is None or sub.kind not in (StepKind.AGENT, StepKind.HUMAN, StepKind.GATE,
                                        StepKind.EXPAND):
        return []
    me = recipient(sub)
    found: list[Envelope] = []

    def add(kind: MessageKind, sender: str, source: SubtaskRecord | None, **fields: Any) -> None:
        found.append(Envelope(
            id=uuid.uuid5(_NAMESPACE, f"{sub.id}:{source.id if source else USER}"),
            timestamp=sub.created_at, sender=sender, recipient=me, kind=kind,
            subtask_id=sub.id, source_subtask_id=source.id if source else None, **fields))

    if sub.kind is StepKind.HUMAN and mine.asks is None:  # a `human` step's own question
        found.append(Envelope(
            id=uuid.uuid5(_NAMESPACE, f"{sub.id}:question"), timestamp=sub.created_at,
            sender=mine.id, recipient=USER, kind=MessageKind.QUESTION, subtask_id=sub.id,
            content=sub.description[:MAX_CONTENT_CHARS]))
    elif not sub.dependencies and sub.kind is not StepKind.HUMAN:
        add(MessageKind.REQUEST, USER, None, content=query[:MAX_CONTENT_CHARS])
    if (fed := _fed_back(doc, mine, sub, subtasks)) is not None:
        source, carried = fed
        add(MessageKind.FEEDBACK, source.role, source, entry=carried,
            revision=revision(steps[source.key.split("#", 1)[0]], source)
            if steps[source.key.split("#", 1)[0]].entry == carried else None)
    for dep_id in sub.dependencies:
        dep = subtasks.get(dep_id)
        theirs = steps.get(dep.key.split("#", 1)[0]) if dep is not None else None
        if dep is None or theirs is None:
            continue
        question = question_of(dep) if theirs is mine else None
        if question is not None:
            add(MessageKind.QUESTION if sub.kind is StepKind.HUMAN else MessageKind.DELEGATION,
                dep.role, dep, content=question)
        elif dep.kind is StepKind.HUMAN:  # a person's answer (a turn's, or a `human` step's)
            add(MessageKind.ANSWER, USER, dep, content=said(dep)[:MAX_CONTENT_CHARS],
                entry=None if theirs is mine else theirs.entry,
                revision=None if theirs is mine else revision(theirs, dep))
        elif theirs is mine and mine.asks is not None:  # a delegated role's answer
            add(MessageKind.OUTPUT, dep.role, dep, entry=None, revision=None)
        else:
            planned = mine.kind is DocStepKind.EXPAND and theirs is mine  # plan, or a peer
            add(MessageKind.OUTPUT, sender(dep), dep, entry=None if planned else theirs.entry,
                revision=None if planned else revision(theirs, dep))
    return found


def _fed_back(doc: WorkflowDocument, mine: StepDoc, sub: SubtaskRecord,
              subtasks: Mapping[uuid.UUID, SubtaskRecord]) -> tuple[SubtaskRecord, str] | None:
    """The run whose loop started `sub`'s round, and the entry it carried (None: not a
    later round's first run of a loop's target)."""
    number, _, turn = sub.key.partition("#")[2].partition(".")
    if number in ("", "1") or (mine.asks is not None and turn != "1"):
        return None
    for loop in doc.loops:
        if loop.to != mine.id:
            continue
        before = [s for s in subtasks.values() if s.key.startswith(f"{loop.source}#")
                  and s.options.looped and (s.options.seq or 0) < (sub.options.seq or 0)]
        if before:
            return (max(before, key=lambda s: (s.options.seq or 0, s.key)),
                    loop.carry or loop.when.entry)
    return None


def sender(sub: SubtaskRecord) -> str:
    return USER if sub.kind is StepKind.HUMAN else sub.role


def recipient(sub: SubtaskRecord) -> str:
    return USER if sub.kind is StepKind.HUMAN else sub.role


def log(doc: WorkflowDocument, query: str,
        subtasks: Iterable[SubtaskRecord]) -> list[Envelope]:
    """Every hand-over of a task, in the order its runs were created."""
    subs = {s.id: s for s in subtasks}
    revisions: dict[uuid.UUID, int] = {}
    for doc_step in doc.steps:
        n = 0
        for runs in rounds_in(subs.values(), doc_step.id):
            if whole(runs):
                n += 1
                revisions.update((r.id, n) for r in runs)

    def revision(_: StepDoc, dep: SubtaskRecord) -> int | None:
        return revisions.get(dep.id)

    ordered = sorted(subs.values(), key=lambda s: (s.created_at, s.options.seq or 0,
                                                   s.key.split("#")[0], item_order(s)))
    return [e for s in ordered for e in received(doc, query, subs, s, revision)]
