"""What a conversation has learned: the record of a step that asks with `learn` (`facts`).

Every turn of the step's role — a question or its final answer — reports in its JSON what the
request and the answers so far told it:

```json
{"ask": "How long do you have?", "about": ["total_timeline"],
 "known": {"field_of_study": {"value": "urban climate", "from": 1},
           "constraints": {"value": ["a permit for the park"], "from": "request"}},
 "unknown": {"resources": {"from": 2}}}
```

`from` is `"request"` (the task's description) or the number of the answer that said it (the
answers of the round counted from 1, as the prompt numbers them). The engine folds each turn's
report into the record (`reported`): a report is taken when its fact is declared, its source is
the request or an answer already given, and its value fits the fact's kind; and it replaces
what the record holds for that fact only when its source is no older (a later answer corrects
an earlier one: "3 years, not 6 months" from answer 3 replaces "6 months" from answer 1, and the
record says answer 3). `unknown` records that the person does not know: the fact is not asked
again and stays missing. The engine, not the role, decides what is still to learn (`open`) and
what is `missing` at the end. Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from shoal.workflows.facts import FACTS, KNOWN, UNKNOWN, Fact, FactKind

REQUEST = "request"  # the source of a fact the task's description told
MAX_VALUE_CHARS = 1_000  # of one text of a fact's value
MAX_ITEMS = 20  # of a list fact's value


@dataclass(frozen=True, slots=True)
class Told:
    """What the record holds for one fact: its value, or None when the person does not know;
    and where it was told (0: the request; n: the round's n-th answer)."""

    value: str | tuple[str, ...] | None
    source: int

    def wire(self) -> dict[str, Any]:
        said: dict[str, Any] = {} if self.value is None else {
            "value": self.value if isinstance(self.value, str) else list(self.value)}
        return said | {"from": REQUEST if self.source == 0 else self.source}


@dataclass(frozen=True, slots=True)
class Record:
    """Every fact a conversation has been told about, by name."""

    told: Mapping[str, Told]

    def known(self) -> dict[str, Told]:
        return {name: t for name, t in self.told.items() if t.value is not None}

    def open(self, learn: Mapping[str, Fact]) -> list[str]:
        """The facts still to learn: neither known nor declined, in the document's order."""
        return [name for name in learn if name not in self.told]

    def missing(self, learn: Mapping[str, Fact]) -> list[str]:
        """The facts not known at the end: never told, or the person did not know."""
        return [name for name in learn if name not in self.known()]

    def wire(self, learn: Mapping[str, Fact]) -> dict[str, Any]:
        """The record as a round's answer holds it under `facts`."""
        return {KNOWN: {n: t.wire() for n, t in self.told.items() if t.value is not None},
                UNKNOWN: {n: t.wire() for n, t in self.told.items() if t.value is None},
                "missing": self.missing(learn)}


EMPTY = Record({})


def record_in(parsed: Any) -> Record:
    """The record a turn's checked answer holds (under `facts`), or the empty one."""
    held = parsed.get(FACTS) if isinstance(parsed, Mapping) else None
    if not isinstance(held, Mapping):
        return EMPTY
    told: dict[str, Told] = {}
    for key in (KNOWN, UNKNOWN):
        for name, entry in (held.get(key) or {}).items():
            if not isinstance(entry, Mapping):
                continue
            source = entry.get("from")
            value = entry.get("value") if key == KNOWN else None
            told[name] = Told(tuple(value) if isinstance(value, list) else value,
                              source if isinstance(source, int) else 0)
    return Record(told)


def reported(record: Record, said: Any, learn: Mapping[str, Fact], answers: int) -> Record:
    """`record` with what a turn's JSON `said` reports under `known` and `unknown`, once
    `answers` answers were given this round (the rules above; what breaks them is left out)."""
    if not isinstance(said, Mapping):
        return record
    told = dict(record.told)
    for key in (UNKNOWN, KNOWN):  # a value and a "does not know" from one answer: the value
        reports = said.get(key)
        for name, entry in (reports.items() if isinstance(reports, Mapping) else ()):
            fact = learn.get(str(name))
            source = _source(entry.get("from") if isinstance(entry, Mapping) else None,
                             answers)
            if fact is None or source is None:
                continue
            value = _value(entry.get("value"), fact.kind) if key == KNOWN else None
            if key == KNOWN and value is None:
                continue
            if name not in told or told[name].source <= source:
                told[str(name)] = Told(value, source)
    return Record(told)


def _source(raw: Any, answers: int) -> int | None:
    if raw == REQUEST:
        return 0
    if isinstance(raw, str) and raw.strip().isdigit():
        raw = int(raw)
    if isinstance(raw, int) and not isinstance(raw, bool) and 1 <= raw <= answers:
        return raw
    return None


def _value(raw: Any, kind: FactKind) -> str | tuple[str, ...] | None:
    """A reported value as its fact's kind holds it (None: not a value)."""
    items = raw if isinstance(raw, list) else [raw]
    texts = [" ".join(str(v).split())[:MAX_VALUE_CHARS] for v in items
             if isinstance(v, str | int | float) and not isinstance(v, bool)]
    texts = [t for t in texts if t]
    if not texts:
        return None
    return tuple(dict.fromkeys(texts))[:MAX_ITEMS] if kind is FactKind.LIST else "; ".join(texts)


def question_for(name: str, fact: Fact) -> str:
    """The engine's own question for a fact."""
    asked = fact.question or f"Could you tell me {fact.description.rstrip('.?')}?"
    return f"{asked} (If you do not know, say so.)"


def asked_about(parsed: Any) -> list[str]:
    """The facts a question turn's checked answer names under `about`."""
    about = parsed.get("about") if isinstance(parsed, Mapping) else None
    return [str(a) for a in about] if isinstance(about, list) else []


def merged(answer: Mapping[str, Any], learn: Mapping[str, Fact],
           record: Record) -> dict[str, Any]:
    """A final answer as the round's value: each known fact in its property (the record, not
    the role, is what the person said), the reports dropped, the record under `facts`."""
    out = {k: v for k, v in answer.items() if k not in (KNOWN, UNKNOWN, "about")}
    for name, told in record.known().items():
        out[name] = told.value if isinstance(told.value, str) else list(told.value or ())
    out[FACTS] = record.wire(learn)
    return out


def brief(learn: Mapping[str, Fact], record: Record, whom: str) -> str:
    """What a turn of the role is told about the facts: what to learn, what is known (and
    from where), what the person does not know, what is still to learn; how to report."""
    lines = [f"\n\nWhat you must learn from {whom} (fact: what it is):"]
    lines += [f"- {name}: {fact.description}" + (" (a list)" if fact.kind is FactKind.LIST
                                                 else "") + ("" if fact.required
                                                             else " (optional)")
              for name, fact in learn.items()]
    known = record.known()
    if known:
        lines += ["Known so far (never ask about these again; a later answer may correct one):"]
        lines += [f"- {name}: {json.dumps(told.wire()['value'], ensure_ascii=False)} "
                  f"({_where(told.source)})" for name, told in known.items()]
    unknown = [f"{name} ({_where(t.source)})" for name, t in record.told.items()
               if t.value is None]
    if unknown:
        lines.append(f"Not known to {whom} (do not ask again): {', '.join(unknown)}")
    still = record.open(learn)
    lines.append(f"Still to learn: {', '.join(still) if still else 'nothing'}")
    lines += ["", "With every answer you give (a question or your final answer) report, in the "
              "same JSON, what the request and the answers told you: "
              '"known": {"<fact>": {"value": "<as told>", "from": "request" or the number of '
              'the answer}} (a list fact\'s value is the whole list of texts), and "unknown": '
              '{"<fact>": {"from": <the number of the answer>}} for a fact you were told is not '
              "known. Report only what was said: never guess a fact."]
    return "\n".join(lines)


def _where(source: int) -> str:
    return "the request" if source == 0 else f"answer {source}"


def first_to_ask(learn: Mapping[str, Fact], record: Record, asked: Iterable[str],
                 named: Iterable[str] = ()) -> str | None:
    """The fact the engine asks for itself: one still to learn that no question was about,
    first among those the role `named`, else the first required one."""
    done = set(asked)
    still = [n for n in record.open(learn) if n not in done]
    return next((n for n in named if n in still), None) or next(
        (n for n in still if learn[n].required), None)
