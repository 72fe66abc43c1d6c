"""The demo model's interviewer (`proposal`'s, whose step learns facts: `workflows/facts.py`).

It reads its prompt as any model would: the request ("Request: …"), the answers ("The user
answered (answer n): …"), what each question was about ("You asked the user (about a, b): …")
and the facts to learn ("What you must learn …: - name: description"). From the text of the
request and each answer, in order, it finds with simple patterns, never more than was said:

- the academic program: a clause naming a degree (MSc, PhD, Master's, Bachelor's, degree,
  program…), without "I'm doing a" and the like;
- the field of study: "field: X", "field of study is X", "studying X", "major in X"; else the
  subject of a program "in X" ("a Master's in Environmental Science");
- the total timeline: a duration (a number, or one to twelve, with weeks, months, years or
  semesters) that no "not", "rather than" or "instead of" comes before — so "3 years, not 6
  months" says 3 years, and a later answer's duration replaces an earlier one;
- resources (a list): clauses with a money amount (€5,000, $300, 2,000 EUR), or that speak of a
  budget, grant, funding, equipment, lab or software without a limit word;
- constraints (a list): clauses that speak of permits, permission, licences, ethics, consent,
  approval, access, travel, or limit something ("no …", "only …", "without …", "cannot …");
- "I don't know" (not sure, no idea, undecided…): the facts its clause names, else those the
  question was about that the answer did not tell, are reported `unknown`.

It reports all of it as `known` / `unknown` with the answer each came from. It asks one
question for the facts of the first group still to learn that no question was about yet
(program and field; then timeline, constraints and resources; then any other fact by its
description); with none left, or no question left, it answers the profile: what it does not know
is "not stated" (an empty list for a list), never a guess.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from shoal.demo.research_script import line_after

NO_MORE = "You may ask no more questions"
NOT_STATED = "not stated"
LIST_FACTS = ("constraints", "resources")
GROUPS = (("academic_program", "field_of_study"), ("total_timeline", "constraints", "resources"))
PHRASES = {"academic_program": "which academic program are you in",
           "field_of_study": "what is your field of study",
           "total_timeline": "how long do you have in total",
           "constraints": "what constraints (permits, ethics, access, travel) do you have",
           "resources": "what resources (budget, equipment, data) can you use"}

NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
           "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12}
DURATION = re.compile(r"\b(\d+(?:\.\d+)?|" + "|".join(NUMBERS) + r"|an?|half a)\s*"
                      r"(weeks?|months?|years?|semesters?)\b", re.I)
_NEGATED = re.compile(r"\b(?:not|n't|rather than|instead of)\s+(?:\w+\s+)?$", re.I)
_DEGREE = (r"(?:(?i:msc|m\.sc|phd|ph\.d|dphil|master'?s?|bachelor'?s?|bsc|b\.sc|mba|degree|"
           r"program(?:me)?|undergraduate|postgraduate|doctorate)|MA|BA)")
_PROGRAM = re.compile(rf"\b{_DEGREE}\b")
_PROGRAM_FIELD = re.compile(rf"\b{_DEGREE}(?i:\s+(?:degree|program(?:me)?|student))?(?i:\s+"
                            r"(?:in|of)\s+(?:the\s+)?)([^,;.\n]+)")
_FIELD = re.compile(r"\b(?:field(?: of study)?\s*(?::|=|is)|field of study|studying|"
                    r"i study|major(?:ing)? in|my discipline is)\s+(?:in\s+)?([^,;.\n]+)", re.I)
_MONEY = re.compile(r"[€$£]\s?\d[\d,.]*\s?k?\b|\b\d[\d,.]*\s?(?:k\s?)?(?:EUR|USD|GBP|euros?|"
                    r"dollars?|pounds?)\b", re.I)
_RESOURCE = re.compile(r"\b(budget|grant|fund\w*|scholarship|equipment|sensors?|lab\w*|"
                       r"software|computer\w*|datasets?)\b", re.I)
_LIMIT = re.compile(r"\b(no|only|without|cannot|can't|not allowed|not permitted|limited|"
                    r"restrict\w*|must|permits?|permission|licen[cs]e\w*|ethic\w*|consent|"
                    r"approval|access\w*|travel\w*|constraints?)\b", re.I)
_UNSURE = re.compile(r"\b(?:(?:i\s+)?(?:don'?t|do not) know|not sure|unsure|no idea|"
                     r"undecided|haven'?t decided|not decided)\b", re.I)
_NAMED = {"academic_program": r"program|degree", "field_of_study": r"field|subject",
          "total_timeline": r"long|time|timeline|duration|months?|years?|weeks?",
          "constraints": r"constraints?|limits?|permits?", "resources":
          r"budget|money|fund\w*|resources?|equipment"}
_NONE = re.compile(r"^(?:none|nothing(?: special)?|no(?: other)? constraints?|no)$", re.I)
_SPLIT = re.compile(r"[;\n!?]+|[.,](?=\s|$)|(?<!field)(?<!study):(?=\s)|\s+(?:and|but)\s+"
                    r"(?=(?:i|i'm|i've|we|my|our|there|a|an|it|no|only|need|have|must|can|"
                    r"cannot|can't|without)\b)", re.I)
_LABELS = frozenset({"budget", "timeline", "time", "duration", "constraints", "resources",
                     "program", "programme", "degree", "money"})
_FILLER = re.compile(r"^(?:and|but|also|so|well|oh|actually|sorry|i think|i guess|i'm|i am|"
                     r"i have|i've got|we have|there is|there's|it's|it is|doing|in|on|a|an|"
                     r"the|my)\b\s*", re.I)


@dataclass
class Heard:
    """What the request and the answers told, each fact with the source that told it last
    (0: the request; n: answer n)."""

    known: dict[str, tuple[Any, int]] = field(default_factory=dict)
    unknown: dict[str, int] = field(default_factory=dict)

    def tell(self, name: str, value: str, source: int) -> None:
        if name in LIST_FACTS:
            held = self.known.get(name, ([], 0))[0]
            value_list = [*held, value] if value not in held else held
            self.known[name] = (value_list, source)
        else:
            self.known[name] = (value, source)
        self.unknown.pop(name, None)

    def wire(self) -> dict[str, Any]:
        return {"known": {n: {"value": v, "from": "request" if s == 0 else s}
                          for n, (v, s) in self.known.items()},
                "unknown": {n: {"from": "request" if s == 0 else s}
                            for n, s in self.unknown.items()}}


def interview(text: str) -> dict[str, Any]:
    """The interviewer's answer to its prompt: a question for what is missing, or the
    profile; either with what it heard."""
    request = line_after(text, "Request:")
    answers = [a for _, a in re.findall(r"^The user answered(?: \(answer (\d+)\))?:[ \t]*(.*)$",
                                        text, flags=re.MULTILINE)]
    abouts = [[f.strip() for f in about.split(",") if f.strip()] for about, _ in re.findall(
        r"^You asked the user(?: \(about ([^)]*)\))?:[ \t]*(.*)$", text, flags=re.MULTILINE)]
    declared = _declared(text)
    heard = hear(request, answers, abouts)
    asked = {f for about in abouts for f in about}
    still = [f for f in declared if f not in heard.known and f not in heard.unknown]
    if NO_MORE not in text:
        groups = [*GROUPS, *([f] for f in declared if f not in PHRASES)]
        for group in groups:
            wanted = [f for f in group if f in still and f not in asked]
            if wanted:
                return {"ask": _question(wanted, declared), "about": wanted, **heard.wire()}
    profile: dict[str, Any] = {name: heard.known[name][0] if name in heard.known else (
        [] if name in LIST_FACTS else NOT_STATED) for name in declared}
    return profile | heard.wire()


def hear(request: str, answers: Sequence[str], abouts: Sequence[Sequence[str]]) -> Heard:
    """What the request and each answer (in order) told; `abouts[n]` the facts the question
    answer n+1 answers was about."""
    heard = Heard()
    for source, said in enumerate([request, *answers]):
        about = list(abouts[source - 1]) if 0 < source <= len(abouts) else []
        told = _told(said, about, request_topic=_topic(request) if source == 0 else "")
        for name, values in told.items():
            for value in values:
                heard.tell(name, value, source)
        if "field_of_study" not in heard.known and (subject := _subject(said)):
            heard.tell("field_of_study", subject, source)
        for name in _unsure(said, about, told):
            if name not in told:
                heard.known.pop(name, None)
                heard.unknown[name] = source
    return heard


def _told(said: str, about: Sequence[str], *, request_topic: str) -> dict[str, list[str]]:
    """The facts one text tells, clause by clause (the rules above)."""
    told: dict[str, list[str]] = {}
    for clause in (c.strip() for c in _SPLIT.split(said) if c and c.strip()):
        if _UNSURE.search(clause) or (request_topic and request_topic in clause):
            continue
        value = _clean(clause)
        if not value or value.casefold() in _LABELS:
            continue
        durations = [m for m in DURATION.finditer(clause)
                     if not _NEGATED.search(clause[:m.start()])]
        if durations:
            told["total_timeline"] = [durations[0].group(0)]
        if field := _FIELD.search(clause):
            told.setdefault("field_of_study", []).append(_clean(field.group(1)))
        elif _PROGRAM.search(clause):
            told.setdefault("academic_program", []).append(value)
        elif _MONEY.search(clause) or (_RESOURCE.search(clause) and not _LIMIT.search(clause)):
            told.setdefault("resources", []).append(value)
        elif _LIMIT.search(clause) and not DURATION.fullmatch(value):
            if not (DURATION.search(clause) and not durations):  # "not 6 months": a correction
                told.setdefault("constraints", []).append(value)
        elif _NONE.match(value) and "constraints" in about:
            told.setdefault("constraints", []).append(value)
    return told


def _unsure(said: str, about: Sequence[str], told: dict[str, list[str]]) -> list[str]:
    """The facts an answer says it does not know: those its "I don't know" clause names, else
    those its question was about that it did not tell."""
    names: list[str] = []
    for clause in _SPLIT.split(said):
        if not clause or not _UNSURE.search(clause):
            continue
        named = [n for n, words in _NAMED.items() if re.search(rf"\b(?:{words})\b", clause, re.I)]
        names += named or [n for n in about if n not in told]
    return list(dict.fromkeys(names))


def _subject(said: str) -> str:
    found = _PROGRAM_FIELD.search(said)
    return _clean(found.group(1)) if found else ""


def _clean(text: str) -> str:
    """A clause as a fact's value: without leading fillers ("and", "I'm doing a") and the
    punctuation around it."""
    text = text.strip(" \t.,;:-")
    while (shorter := _FILLER.sub("", text, count=1)) != text and shorter:
        text = shorter
    return text.strip(" \t.,;:-")


def _topic(request: str) -> str:
    found = re.search(r"\b(?:on|about|into)\s+([^:;,.?!\n]+)", request, flags=re.I)
    return found.group(1).strip() if found else ""


def _declared(text: str) -> dict[str, str]:
    """The facts the prompt says to learn and what each is, in its order (the proposal's
    when it names none)."""
    at = text.find("What you must learn")
    if at < 0:
        return dict(PHRASES)
    names: dict[str, str] = {}
    for line in text[at:].splitlines()[1:]:
        found = re.match(r"^- ([a-z][a-z0-9_]*): (.*?)(?: \(a list\))?(?: \(optional\))?$", line)
        if found is None:
            break
        names[found.group(1)] = found.group(2)
    return names


def _question(wanted: Sequence[str], declared: dict[str, str]) -> str:
    """One question for `wanted`: their phrases joined ("A, and B?")."""
    phrases = [PHRASES.get(name) or f"could you tell me {declared[name]}" for name in wanted]
    joined = phrases[0] if len(phrases) == 1 else ", ".join(phrases[:-1]) + ", and " + \
        phrases[-1]
    return joined[0].upper() + joined[1:] + "?"
