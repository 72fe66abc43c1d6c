"""A conversation's turns, read (`conversations` runs them): the question an answer asks, what a
turn said, the transcript a turn of the asking role is shown, and what it is told about asking.
Pure functions over subtasks."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from shoal.engine import answers
from shoal.engine.model import StepKind, SubtaskRecord
from shoal.workflows import learning
from shoal.workflows.blackboard import item_order
from shoal.workflows.board import MAX_ENTRY_CHARS
from shoal.workflows.document import Asks, StepDoc
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


def record_of(doc_step: StepDoc, runs: list[SubtaskRecord],
            said: Any) -> learning.Record:
    """What a round of a step that learns knows after `runs` and a turn that `said`."""
    assert doc_step.asks is not None
    before = next((learning.record_in(s.output.parsed) for s in sorted(
        runs, key=item_order, reverse=True) if not answered(doc_step, s)
        and s.output is not None and s.output.answers), learning.EMPTY)
    given = sum(1 for s in runs if answered(doc_step, s))
    return learning.reported(before, said, doc_step.asks.learn, given)
