"""Steps that ask before they answer (`asks`): the `agent` step's handler holds `Conversations`.

A round of such a step is a conversation, one subtask per turn (`step#n.1`, `step#n.2`, …):
the step's role; whom it asked — a person (a `human` turn: the task waits, `awaiting_input`,
at a `question` checkpoint, holding no worker) or another role (a delegation: an agent subtask
of that role, retried and billed like any run) —; the step's role again with the whole
conversation (`{conversation}`); and so on until its role answers without asking. At the cap
(`max`) it is told to answer with what it has and say what is missing. The round's value is
its last turn's answer, so the steps after it wait for the whole conversation.

A step that `learn`s (`facts`) keeps a record of what it was told (`learning`), and the engine
decides what is still to learn: a question passes only when every fact it names (`about`) is
still to learn; one about a fact known or not known, or naming none, is not passed on — the
engine asks for a fact still to learn that no question was about yet (its own question, from
the fact's description), or, with none left, has the role answer. An answer given while a
required fact is still to learn, and no question was about it, is not taken either: the engine
asks for the fact. The round's answer holds every known fact in its property and the record
under `facts`; a later step with `requires_facts` must state them (`mentions`).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from shoal.engine import answers
from shoal.engine.model import StepKind, StepOutput, SubtaskRecord
from shoal.engine.options import StepOptions
from shoal.engine.step import Step
from shoal.events import EventType
from shoal.states import SubtaskStatus
from shoal.workflows import learning, people
from shoal.workflows.blackboard import item_order
from shoal.workflows.document import Role, StepDoc
from shoal.workflows.facts import FACTS
from shoal.workflows.runs import Runs
from shoal.workflows.turns import (
    ABOUT,
    ASK,
    MAX_QUESTION_CHARS,
    WITHHELD,
    asking,
    hint,
    question_in,
    question_of,
    record_of,
    round_of,
    transcript,
    whom,
)


class Conversations:
    """The turns of a step that asks (the `agent` step's handler holds one)."""

    def __init__(self, runs: Runs) -> None:
        self.runs = runs
        self.board = runs.board

    def _asks_left(self, step: Step, doc_step: StepDoc, runs: list[SubtaskRecord]) -> int:
        assert doc_step.asks is not None
        asked = sum(1 for s in runs if question_of(s) is not None)
        return self.board.cap(step.task, doc_step.asks.max) - asked

    def question(self, step: Step, doc_step: StepDoc, sub: SubtaskRecord,
                  text: str) -> Mapping[str, Any] | None:
        """The question turn `sub` is (`{"ask": …}`, for a step that learns with what it
        learned) when its step's role may still ask; None when it answers (then it is checked
        against the role's contract)."""
        if doc_step.asks is None or sub.role != doc_step.role or sub.kind is not StepKind.AGENT:
            return None
        runs = [s for s in self.board.same_round(step, sub) if item_order(s) < item_order(sub)]
        if self._asks_left(step, doc_step, runs) <= 0:
            return None
        if doc_step.asks.learn:
            return self._learning_question(step, doc_step, sub, text, runs)
        question = question_in(text)
        return None if question is None else {ASK: question}

    def _learning_question(self, step: Step, doc_step: StepDoc, sub: SubtaskRecord, text: str,
                           runs: list[SubtaskRecord]) -> Mapping[str, Any] | None:
        """A turn of a role that learns: its question, if it asks only for facts still to
        learn; else the engine's own question for one, or None (the role answers)."""
        asks = doc_step.asks
        assert asks is not None
        found = answers.find_json(text)
        said = found.value if found.found and isinstance(found.value, Mapping) else {}
        record = record_of(doc_step, runs, said)
        asked = [a for s in runs if question_of(s) is not None
                 for a in learning.asked_about(s.output.parsed if s.output else None)]
        question = said.get(ASK)
        about = learning.asked_about(said)
        still = record.open(asks.learn)
        facts = {FACTS: record.wire(asks.learn)}
        if isinstance(question, str) and question.strip():
            question = question.strip()[:MAX_QUESTION_CHARS]
            if about and all(a in still for a in about):
                return {ASK: question, ABOUT: about} | facts
            target = learning.first_to_ask(asks.learn, record, asked, about)
            self._withheld(step, doc_step, sub, question, about, record, target)
            if target is None:
                return None  # nothing the engine may ask: the role must answer
            return {ASK: learning.question_for(target, asks.learn[target]), ABOUT: [target],
                    WITHHELD: question} | facts
        target = learning.first_to_ask(asks.learn, record, asked)
        if target is None:
            return None
        step.emit(EventType.NOTICE, level="info", subtask_id=str(sub.id), message=(
            f"Step '{doc_step.id}' answered while '{target}' was still to learn and no question "
            f"was about it: Shoal asks {whom(asks)} for it."))
        return {ASK: learning.question_for(target, asks.learn[target]), ABOUT: [target]} | facts

    def _withheld(self, step: Step, doc_step: StepDoc, sub: SubtaskRecord, question: str,
                  about: list[str], record: learning.Record, target: str | None) -> None:
        assert doc_step.asks is not None
        told = [a for a in about if a in record.told]
        why = (f"about {', '.join(told)}, which {whom(doc_step.asks)} already told or does "
               "not know" if told else "without naming a fact still to learn (`about`)")
        then = (f"Shoal asked for '{target}' instead" if target is not None
                else "its role must answer now")
        step.emit(EventType.NOTICE, level="info", subtask_id=str(sub.id), message=(
            f"Step '{doc_step.id}' asked {why}; the question was not passed on and {then} "
            f"(withheld: {question[:200]})."))

    def kept(self, step: Step, doc_step: StepDoc, sub: SubtaskRecord,
             output: StepOutput) -> StepOutput:
        """A checked answer as its round keeps it: the final answer of a step that learns,
        with what it learned."""
        asks = doc_step.asks
        if (asks is not None and asks.learn and sub.role == doc_step.role
                and sub.kind is StepKind.AGENT and isinstance(output.parsed, Mapping)
                and not asking(output.parsed)):
            runs = [s for s in self.board.same_round(step, sub) if item_order(s) < item_order(sub)]
            record = record_of(doc_step, runs, output.parsed)
            output = replace(output, parsed=learning.merged(output.parsed, asks.learn, record))
        return output

    def turn(self, step: Step, doc_step: StepDoc, number: int, turn: int, seq: int,
              deps: tuple[uuid.UUID, ...], feedback: str) -> None:
        """A turn of the step's own role: its prompt, the conversation so far, how many
        questions it may still ask."""
        assert doc_step.asks is not None
        assert doc_step.role is not None
        prefix = f"{doc_step.id}#{number}."
        runs = [s for s in step.subtasks.values() if s.key.startswith(prefix)]
        role: Role = self.board.doc.roles[doc_step.role]
        left = self._asks_left(step, doc_step, runs)
        prompt = self.board.prompt(step, doc_step, role, feedback, "", transcript(doc_step, runs))
        if doc_step.asks.learn:
            record = record_of(doc_step, runs, None)
            left = left if record.open(doc_step.asks.learn) else 0
            prompt += learning.brief(doc_step.asks.learn, record, whom(doc_step.asks))
        prompt += hint(doc_step.asks, left)
        self.runs.new_run(step, doc_step, key=f"{doc_step.id}#{number}.{turn}",
                      name=doc_step.id + (f" (round {number})" if number > 1 else "")
                      + (f", turn {turn}" if turn > 1 else ""),
                      role_name=doc_step.role, prompt=prompt, seq=seq, deps=deps)

    def next_turn(self, step: Step, doc_step: StepDoc, sub: SubtaskRecord) -> bool:
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
            role = self.board.doc.roles[asks.role]
            self.runs.new_run(step, doc_step, key=key, name=f"{doc_step.id}: asks {asks.role}",
                          role_name=asks.role, seq=seq, deps=(sub.id,),
                          prompt=self.board.prompt(step, doc_step, role, "", question))
            return True
        self.turn(step, doc_step, number, turn + 1, seq, (sub.id,),
                   self._feedback_for(step, doc_step) if number > 1 else "")
        return True

    def _ask_person(self, step: Step, doc_step: StepDoc, key: str, question: str, seq: int,
                    asker: SubtaskRecord) -> None:
        asked = sum(1 for s in self.board.same_round(step, asker) if s.kind is StepKind.HUMAN) + 1
        sub = SubtaskRecord(
            id=step.ctx.new_ordered_id(), task_id=step.task.id, key=key, role="human",
            kind=StepKind.HUMAN, name=f"{doc_step.id}: question {asked}",
            description=question, status=SubtaskStatus.IN_PROGRESS, created_at=step.ctx.now,
            started_at=step.ctx.now, dependencies=(asker.id,), options=StepOptions(seq=seq))
        step.add_subtask(sub)
        self.runs.emit_created(step, sub)
        people.ask(step, sub, people.QUESTION, f"Step '{doc_step.id}' asks: {question}",
                   question)

    def _feedback_for(self, step: Step, doc_step: StepDoc) -> str:
        """The `{feedback}` a round of `doc_step` that a loop started was given."""
        for loop in self.board.doc.loops:
            last = self.board.rounds(step, loop.source)[-1:] if loop.to == doc_step.id else []
            if last and any(s.options.looped for s in last[0]):
                return self.board.entry(step, loop.carry or loop.when.entry, "")
        return ""
