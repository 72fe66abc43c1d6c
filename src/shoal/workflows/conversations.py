"""Steps that ask before they answer (`asks`; `DocumentWorkflow` mixes this in).

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

import json
import uuid
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from shoal.engine import answers, graph
from shoal.engine.model import StepKind, StepOutput, SubtaskRecord
from shoal.engine.options import StepOptions
from shoal.engine.step import Step
from shoal.events import EventType
from shoal.states import SubtaskStatus, transition
from shoal.workflows import learning, mentions, people
from shoal.workflows.blackboard import item_order, whole
from shoal.workflows.board import MAX_ENTRY_CHARS, Board
from shoal.workflows.document import Asks, Role, StepDoc
from shoal.workflows.facts import FACTS

ASK = "ask"  # the field of an answer that asks: {"ask": "<question>"}
ABOUT = "about"  # a step that learns: the facts a question asks for
WITHHELD = "withheld"  # the role's question the engine did not pass on (it asked its own)
QUESTION_KEYS = frozenset({ASK, ABOUT, FACTS, WITHHELD})
MAX_QUESTION_CHARS = 4_000
NO_ANSWER = "(no answer: the question's deadline passed)"


def question_in(text: str) -> str | None:
    """The question an answer asks (`{"ask": "…"}` and nothing else), or None."""
    found = answers.find_json(text)
    value = found.value if found.found else None
    asked = value.get(ASK) if isinstance(value, dict) and set(value) == {ASK} else None
    return asked.strip()[:MAX_QUESTION_CHARS] if isinstance(asked, str) and asked.strip() \
        else None


def asking(parsed: Any) -> bool:
    """Whether a turn's checked answer is a question (`{"ask": …}`, with what a step that
    learns adds to it), not an answer."""
    return isinstance(parsed, Mapping) and ASK in parsed and set(parsed) <= QUESTION_KEYS


def question_of(sub: SubtaskRecord) -> str | None:
    """The question a completed turn asked, or None (an answer, or not done)."""
    out = sub.output
    if out is None or not out.answers or not asking(out.parsed):
        return None
    assert isinstance(out.parsed, Mapping)
    return str(out.parsed[ASK])


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


def answered(doc_step: StepDoc, sub: SubtaskRecord) -> bool:
    """Whether a turn is an answer to the step's role (a person's, or the other role's)."""
    return sub.kind is StepKind.HUMAN or sub.role != doc_step.role


def transcript(doc_step: StepDoc, runs: list[SubtaskRecord]) -> str:
    """A round's conversation so far, one line per turn after the first question; a step
    that learns numbers the answers and names the facts each question was about."""
    assert doc_step.asks is not None
    learns = bool(doc_step.asks.learn)
    lines: list[str] = []
    number = 0
    for sub in sorted(runs, key=item_order):
        if (question := question_of(sub)) is not None:
            about = learning.asked_about(sub.output.parsed if sub.output else None)
            topic = f" (about {', '.join(about)})" if learns and about else ""
            lines.append(f"You asked {whom(doc_step.asks)}{topic}: {question}")
        elif answered(doc_step, sub):
            number += 1
            which = f" (answer {number})" if learns else ""
            who = "The user" if sub.kind is StepKind.HUMAN else f"The {sub.role} agent"
            lines.append(f"{who} answered{which}: {said(sub)}")
    return "\n".join(lines)


def hint(asks: Asks, left: int) -> str:
    """What a turn of the asking role is told about asking."""
    if left <= 0:
        return ("\n\nYou may ask no more questions: answer now with what you have, and say "
                "what is still missing." + (' Your answer reports "known" and "unknown" too.'
                                            if asks.learn else ""))
    if asks.learn:
        return (f"\n\nTo ask {whom(asks)} for a fact still to learn, answer with only this "
                f"JSON instead, one question at a time ({left} left), naming in \"about\" the "
                "facts it asks for (a question about a fact already known, or not known, is "
                'not passed on):\n{"ask": "<your question>", "about": ["<fact>"], "known": {}, '
                '"unknown": {}}')
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
                  text: str) -> Mapping[str, Any] | None:
        """The question turn `sub` is (`{"ask": …}`, for a step that learns with what it
        learned) when its step's role may still ask; None when it answers (then it is checked
        against the role's contract)."""
        if doc_step.asks is None or sub.role != doc_step.role or sub.kind is not StepKind.AGENT:
            return None
        runs = [s for s in self._round(step, sub) if item_order(s) < item_order(sub)]
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
        record = self._record(doc_step, runs, said)
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

    def _record(self, doc_step: StepDoc, runs: list[SubtaskRecord],
                said: Any) -> learning.Record:
        """What a round of a step that learns knows after `runs` and a turn that `said`."""
        assert doc_step.asks is not None
        before = next((learning.record_in(s.output.parsed) for s in sorted(
            runs, key=item_order, reverse=True) if not answered(doc_step, s)
            and s.output is not None and s.output.answers), learning.EMPTY)
        given = sum(1 for s in runs if answered(doc_step, s))
        return learning.reported(before, said, doc_step.asks.learn, given)

    def _told(self, step: Step, doc_step: StepDoc, sub: SubtaskRecord,
              output: StepOutput) -> StepOutput | None:
        """A checked answer as its round keeps it: the final answer of a step that learns
        with what it learned; one of a step with `requires_facts` that leaves out a known fact
        is sent back once (None), then kept with a notice."""
        asks = doc_step.asks
        if (asks is not None and asks.learn and sub.role == doc_step.role
                and sub.kind is StepKind.AGENT and isinstance(output.parsed, Mapping)
                and not asking(output.parsed)):
            runs = [s for s in self._round(step, sub) if item_order(s) < item_order(sub)]
            record = self._record(doc_step, runs, output.parsed)
            output = replace(output, parsed=learning.merged(output.parsed, asks.learn, record))
        missing = mentions.left_out(output.text or "", self._required(step, doc_step))
        if not missing:
            return output
        if not sub.options.repair:
            self._send_back(step, sub, mentions.SENT_BACK + mentions.described(missing))
            return None
        step.emit(EventType.NOTICE, level="warning", subtask_id=str(sub.id), message=(
            f"Step '{doc_step.id}' leaves out what the user told: "
            f"{mentions.described(missing)}."))
        return output

    def _required(self, step: Step, doc_step: StepDoc) -> dict[str, learning.Told]:
        """The known facts a step with `requires_facts` must state: those its source step's
        latest round learned (its answer holds the record)."""
        needs = doc_step.requires_facts
        if needs is None:
            return {}
        latest = [r for r in self._rounds(step, needs.source) if whole(r)][-1:]
        final = latest[0][-1].output if latest else None
        record = learning.record_in(final.parsed if final is not None else None)
        return {n: t for n, t in record.known().items() if not needs.facts or n in needs.facts}

    def _to_state(self, step: Step, doc_step: StepDoc) -> str:
        """What a run of a step with `requires_facts` is told to state."""
        known = self._required(step, doc_step)
        if not known:
            return ""
        source = doc_step.requires_facts.source if doc_step.requires_facts else ""
        return (f"\n\nWhat '{source}' was told: state each fact where it belongs, as told (an "
                "answer that leaves one out is sent back):\n" + "\n".join(
                    f"- {name}: {json.dumps(told.wire()['value'], ensure_ascii=False)}"
                    for name, told in known.items()))

    def _send_back(self, step: Step, sub: SubtaskRecord, problem: str) -> None:
        """Queue `sub` again, told the problem with its answer (the one repair it gets)."""
        sub = step.set_subtask(sub, status=transition(sub.status, SubtaskStatus.QUEUED),
                               current_attempt_id=None, error=problem,
                               options=replace(sub.options, repair=problem))
        graph.emit_subtask(step, sub, repair=True)

    def _turn(self, step: Step, doc_step: StepDoc, number: int, turn: int, seq: int,
              deps: tuple[uuid.UUID, ...], feedback: str) -> None:
        """A turn of the step's own role: its prompt, the conversation so far, how many
        questions it may still ask."""
        assert doc_step.asks is not None
        assert doc_step.role is not None
        prefix = f"{doc_step.id}#{number}."
        runs = [s for s in step.subtasks.values() if s.key.startswith(prefix)]
        role: Role = self.doc.roles[doc_step.role]
        left = self._asks_left(step, doc_step, runs)
        prompt = self._prompt(step, doc_step, role, feedback, "", transcript(doc_step, runs))
        if doc_step.asks.learn:
            record = self._record(doc_step, runs, None)
            left = left if record.open(doc_step.asks.learn) else 0
            prompt += learning.brief(doc_step.asks.learn, record, whom(doc_step.asks))
        prompt += hint(doc_step.asks, left)
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
