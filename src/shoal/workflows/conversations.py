"""Steps that ask before they answer (`asks`; `DocumentWorkflow` mixes this in).

A round of such a step is a conversation, one subtask per turn (`step#n.1`, `step#n.2`, …):
the step's role; whom it asked — a person (a `human` turn: the task waits, `awaiting_input`,
at a `question` checkpoint, holding no worker) or another role (a delegation: an agent subtask
of that role, retried and billed like any run) —; the step's role again with the whole
conversation (`{conversation}`); and so on until its role answers without asking. At the cap
(`max`) it is told to answer with what it has and say what is missing. The round's value is
its last turn's answer, so the steps after it wait for the whole conversation.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping

from shoal.engine import answers
from shoal.engine.model import StepKind, SubtaskRecord
from shoal.engine.options import StepOptions
from shoal.engine.step import Step
from shoal.states import SubtaskStatus
from shoal.workflows import people
from shoal.workflows.blackboard import item_order
from shoal.workflows.board import MAX_ENTRY_CHARS, Board
from shoal.workflows.document import Asks, Role, StepDoc

ASK = "ask"  # the one field of an answer that asks: {"ask": "<question>"}
MAX_QUESTION_CHARS = 4_000
NO_ANSWER = "(no answer: the question's deadline passed)"


def question_in(text: str) -> str | None:
    """The question an answer asks (`{"ask": "…"}` and nothing else), or None."""
    found = answers.find_json(text)
    value = found.value if found.found else None
    asked = value.get(ASK) if isinstance(value, dict) and set(value) == {ASK} else None
    return asked.strip()[:MAX_QUESTION_CHARS] if isinstance(asked, str) and asked.strip() \
        else None


def question_of(sub: SubtaskRecord) -> str | None:
    """The question a completed turn asked, or None (an answer, or not done)."""
    out = sub.output
    if out is None or not out.answers or not isinstance(out.parsed, Mapping):
        return None
    return str(out.parsed[ASK]) if set(out.parsed) == {ASK} else None


def whom(asks: Asks) -> str:
    return "the user" if asks.role is None else f"the {asks.role} agent"


def said(sub: SubtaskRecord) -> str:
    """What a turn said, as text."""
    out = sub.output
    if out is None:
        return ""
    if out.answers and out.parsed is not None:
        return json.dumps(out.parsed, ensure_ascii=False)[:MAX_ENTRY_CHARS]
    return (out.text or "")[:MAX_ENTRY_CHARS]


def transcript(doc_step: StepDoc, runs: list[SubtaskRecord]) -> str:
    """A round's conversation so far, one line per turn after the first question."""
    assert doc_step.asks is not None
    lines: list[str] = []
    for sub in sorted(runs, key=item_order):
        if (question := question_of(sub)) is not None:
            lines.append(f"You asked {whom(doc_step.asks)}: {question}")
        elif sub.kind is StepKind.HUMAN:
            lines.append(f"The user answered: {said(sub)}")
        elif sub.role != doc_step.role:
            lines.append(f"The {sub.role} agent answered: {said(sub)}")
    return "\n".join(lines)


def hint(asks: Asks, left: int) -> str:
    """What a turn of the asking role is told about asking."""
    if left <= 0:
        return ("\n\nYou may ask no more questions: answer now with what you have, and say "
                "what is still missing.")
    return (f"\n\nIf you need something only {whom(asks)} can tell you, do not guess: answer "
            'with only this JSON instead, one question at a time (' + str(left) + ' left):\n'
            '{"ask": "<your question>"}')


def round_of(sub: SubtaskRecord) -> tuple[int, int]:
    """(round, turn) of a turn's key `step#round.turn`."""
    number, _, turn = sub.key.partition("#")[2].partition(".")
    return int(number), int(turn or 0)


class ConversationRuns(Board):
    """The conversation half of `DocumentWorkflow`."""

    def _new_run(self, step: Step, doc_step: StepDoc, *, key: str, name: str, role_name: str,
                 prompt: str, seq: int, deps: tuple[uuid.UUID, ...]) -> SubtaskRecord:
        raise NotImplementedError  # `DocumentWorkflow`

    def _asks_left(self, step: Step, doc_step: StepDoc, runs: list[SubtaskRecord]) -> int:
        assert doc_step.asks is not None
        asked = sum(1 for s in runs if question_of(s) is not None)
        return self._cap(step.task, doc_step.asks.max) - asked

    def _question(self, step: Step, doc_step: StepDoc, sub: SubtaskRecord,
                  text: str) -> str | None:
        """The question `sub`'s answer asks when its step's role may still ask; None when it
        answers (then it is checked against the role's contract)."""
        if doc_step.asks is None or sub.role != doc_step.role or sub.kind is not StepKind.AGENT:
            return None
        question = question_in(text)
        if question is None or self._asks_left(step, doc_step, self._round(step, sub)) <= 0:
            return None
        return question

    def _turn(self, step: Step, doc_step: StepDoc, number: int, turn: int, seq: int,
              deps: tuple[uuid.UUID, ...], feedback: str) -> None:
        """A turn of the step's own role: its prompt, the conversation so far, how many
        questions it may still ask."""
        assert doc_step.asks is not None
        assert doc_step.role is not None
        prefix = f"{doc_step.id}#{number}."
        runs = [s for s in step.subtasks.values() if s.key.startswith(prefix)]
        role: Role = self.doc.roles[doc_step.role]
        prompt = self._prompt(step, doc_step, role, feedback, "",
                              transcript(doc_step, runs)) + hint(
            doc_step.asks, self._asks_left(step, doc_step, runs))
        self._new_run(step, doc_step, key=f"{doc_step.id}#{number}.{turn}",
                      name=doc_step.id + (f" (round {number})" if number > 1 else "")
                      + (f", turn {turn}" if turn > 1 else ""),
                      role_name=doc_step.role, prompt=prompt, seq=seq, deps=deps)

    def _next_turn(self, step: Step, doc_step: StepDoc, sub: SubtaskRecord) -> bool:
        """After a completed turn, the next: whom the role asked, or the role again with the
        answer. False when `sub` is the role's answer (the round is whole)."""
        asks = doc_step.asks
        if asks is None:
            return False
        number, turn = round_of(sub)
        seq = sub.options.seq or 0
        if sub.role == doc_step.role and sub.kind is StepKind.AGENT:
            question = question_of(sub)
            if question is None:
                return False
            key = f"{doc_step.id}#{number}.{turn + 1}"
            if asks.role is None:
                self._ask_person(step, doc_step, key, question, seq, sub)
                return True
            role = self.doc.roles[asks.role]
            self._new_run(step, doc_step, key=key, name=f"{doc_step.id}: asks {asks.role}",
                          role_name=asks.role, seq=seq, deps=(sub.id,),
                          prompt=self._prompt(step, doc_step, role, "", question))
            return True
        self._turn(step, doc_step, number, turn + 1, seq, (sub.id,),
                   self._feedback_for(step, doc_step) if number > 1 else "")
        return True

    def _ask_person(self, step: Step, doc_step: StepDoc, key: str, question: str, seq: int,
                    asker: SubtaskRecord) -> None:
        asked = sum(1 for s in self._round(step, asker) if s.kind is StepKind.HUMAN) + 1
        sub = SubtaskRecord(
            id=step.ctx.new_id(), task_id=step.task.id, key=key, role="human",
            kind=StepKind.HUMAN, name=f"{doc_step.id}: question {asked}",
            description=question, status=SubtaskStatus.IN_PROGRESS, created_at=step.ctx.now,
            started_at=step.ctx.now, dependencies=(asker.id,), options=StepOptions(seq=seq))
        step.add_subtask(sub)
        self._emit_created(step, sub)
        people.ask(step, sub, people.QUESTION, f"Step '{doc_step.id}' asks: {question}",
                   question)

    def _emit_created(self, step: Step, sub: SubtaskRecord) -> None:
        raise NotImplementedError  # `DocumentWorkflow`

    def _feedback_for(self, step: Step, doc_step: StepDoc) -> str:
        """The `{feedback}` a round of `doc_step` that a loop started was given."""
        for loop in self.doc.loops:
            last = self._rounds(step, loop.source)[-1:] if loop.to == doc_step.id else []
            if last and any(s.options.looped for s in last[0]):
                return self._entry(step, loop.carry or loop.when.entry, "")
        return ""
