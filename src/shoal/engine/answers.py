"""Model answers read as JSON: finding the JSON in an answer, then the judge's and reviewer's.

Models wrap JSON in prose and fences. `find_json` (and its short form `extract_json`) looks
for it in order: the whole text, a ```json (or bare ```) fenced block, then the first balanced
`{…}` or `[…]` in the prose, matched bracket by bracket with strings and escapes skipped.
`parse_judge` and `parse_review` turn an answer into typed, validated values: scores clamped
to 0 to 10, missing optional fields defaulted, and an `AnswerError` that says what was wrong
(for the repair retry) when the answer has no usable score. Pure: no I/O.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from shoal.errors import InvalidInput

Severity = Literal["critical", "high", "medium", "low"]
Decision = Literal["approved", "needs_revision"]

SEVERITIES: tuple[Severity, ...] = ("critical", "high", "medium", "low")
MAX_SCANS = 200  # bracket scans per answer: bounds the work on pathological text
MAX_PARSES = 200  # json.loads attempts per answer, for the same reason
MAX_SCORE = 10.0


class AnswerError(InvalidInput):
    """A model's answer that cannot be used: no JSON, the wrong shape, or no score."""

    code = "invalid_answer"


# ---- finding the JSON --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JsonSearch:
    """What `find_json` found: `value` when `found`, and the first parse error it met."""

    found: bool
    value: Any = None
    error: str | None = None


_FENCE = re.compile(r"```[ \t]*(json)?[ \t]*\n?(.*?)```", re.DOTALL | re.IGNORECASE)
_OPENER = re.compile(r"[\[{]")
_SIGNIFICANT = re.compile(r'[\[\]{}"\\]')
_CLOSER = {"[": "]", "{": "}"}


def extract_json(text: str, *, prefer: Callable[[Any], bool] | None = None) -> Any | None:
    """The JSON value in a model answer, or None when it holds none (see `find_json`)."""
    return find_json(text, prefer=prefer).value


def find_json(text: str, *, prefer: Callable[[Any], bool] | None = None) -> JsonSearch:
    """Look for JSON in `text`: the whole text, else a fenced block, else a balanced span.

    With `prefer`, the first candidate it accepts wins, and the search goes on past those it
    refuses (an unrelated object before the wanted array); if it accepts none, the first
    candidate is returned.
    """
    first: JsonSearch | None = None
    error: str | None = None
    for value, problem in _candidates(text):
        if problem is not None:
            error = error or problem
            continue
        if prefer is None or prefer(value):
            return JsonSearch(True, value, error)
        first = first or JsonSearch(True, value)
    if first is not None:
        return JsonSearch(True, first.value, error)
    return JsonSearch(False, None, error)


def _candidates(text: str) -> Iterator[tuple[Any, str | None]]:
    """Parsed candidates in order of precedence, as (value, None) or (None, parse error)."""
    start = len(text) - len(text.lstrip())
    whole = _parse(text, start, len(text))
    if whole[1] is None or _starts_like_json(text, start):
        yield whole  # only an answer that starts like JSON reports why it is not
    for fenced in _FENCE.finditer(text):
        body = fenced.group(2)
        begin = fenced.start(2) + len(body) - len(body.lstrip())
        value, problem = _parse(text, begin, fenced.end(2))
        if problem is None or fenced.group(1) or _starts_like_json(text, begin):
            yield value, problem  # a fence of Python code is no JSON error either
    yield from _spans(text)


_DECODER = json.JSONDecoder()


def _parse(text: str, start: int, stop: int) -> tuple[Any, str | None]:
    """The JSON value filling `text[start:stop]`, whitespace aside; errors point into `text`."""
    try:
        value, end = _DECODER.raw_decode(text, start)
    except (ValueError, RecursionError) as exc:
        return None, str(exc) or type(exc).__name__
    if text[end:stop].strip():
        return None, str(json.JSONDecodeError("Extra data", text, end))
    return value, None


def _spans(text: str) -> Iterator[tuple[Any, str | None]]:
    """Each balanced `{…}` / `[…]` that parses; a span that parses hides those inside it."""
    closes: dict[int, int] = {}  # opener position → its closer's, or -1 when it has none
    scans = parses = 0
    resume = 0
    for opener in _OPENER.finditer(text):
        start = opener.start()
        if start < resume:
            continue
        if start not in closes:
            if scans == MAX_SCANS:
                return
            scans += 1
            closes.update(_match_brackets(text, start))
        end = closes.get(start, -1)
        if end < 0:
            continue
        if parses == MAX_PARSES:
            return
        parses += 1
        value, problem = _parse(text, start, end + 1)
        if problem is None:
            resume = end + 1
            yield value, None
        elif _starts_like_json(text, start):
            yield None, problem  # "[see below]" in prose is no JSON error worth reporting


def _starts_like_json(text: str, start: int) -> bool:
    """Whether `start` holds a bracket followed by what JSON allows there (or nothing)."""
    opener = text[start:start + 1]
    after = text[start + 1:start + 200].lstrip()[:1]
    if opener == "{":
        return after in ("", '"', "}")
    return opener == "[" and (after == "" or after in '"{[]-0123456789tfn')


def _match_brackets(text: str, start: int) -> dict[int, int]:
    """Closers of the opener at `start` and of every opener met outside a string on the way.

    Scanning from any of those openers would see the same strings and the same innermost
    brackets, so one scan settles them all: popped ones close, the rest (still open at the
    end of the text or at a mismatched closer) get -1.
    """
    found: dict[int, int] = {}
    stack: list[int] = []
    in_string = False
    skip_to = 0  # the character after a backslash inside a string is escaped
    for match in _SIGNIFICANT.finditer(text, start):
        at, char = match.start(), match.group()
        if in_string:
            if at < skip_to:
                continue
            if char == "\\":
                skip_to = at + 2
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in _CLOSER:
            stack.append(at)
        elif char in "]}":
            if _CLOSER[text[stack[-1]]] != char:
                break
            found[stack.pop()] = at
            if not stack:
                return found
    found.update(dict.fromkeys(stack, -1))
    return found


# ---- the judge ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DimensionScore:
    """One scored dimension of a judge's answer."""

    score: float
    issues: tuple[str, ...] = ()
    suggestions: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class JudgeResult:
    """A judge's answer: completeness and architecture alignment, each scored 0 to 10."""

    completeness: DimensionScore
    architecture: DimensionScore

    def as_dimensions(self) -> dict[str, dict[str, Any]]:
        """The dimensions as plain data, keyed by name (the shape `quality.combine` reads)."""
        return {name: {"score": part.score, "issues": list(part.issues),
                       "suggestions": list(part.suggestions)}
                for name, part in (("completeness", self.completeness),
                                   ("architecture", self.architecture))}


_JUDGE_SHAPE = ('{"completeness": {"score": <0-10>, "issues": [...], "suggestions": [...]}, '
                '"architecture": {"score": <0-10>, "issues": [...], "suggestions": [...]}}')


def parse_judge(text: str) -> JudgeResult:
    """A judge's answer, validated. Raises `AnswerError` saying what was wrong."""
    answer = _answer_object(text, _JUDGE_SHAPE, ("completeness", "architecture",
                                                 "architecture_alignment"))
    return JudgeResult(
        completeness=_dimension(answer, ("completeness",)),
        architecture=_dimension(answer, ("architecture", "architecture_alignment")),
    )


def _dimension(answer: Mapping[str, Any], names: tuple[str, ...]) -> DimensionScore:
    name = next((n for n in names if n in answer), names[0])
    part = answer.get(name)
    if isinstance(part, int | float | str) and not isinstance(part, bool):
        part = {"score": part}  # a bare score is accepted, without issues
    if not isinstance(part, Mapping):
        raise AnswerError(
            f'The answer\'s "{name}" is {_shape(part, missing=True)}, not an object with a '
            f"score. Answer with exactly {_JUDGE_SHAPE}.", details={"field": name})
    return DimensionScore(
        score=_score(part.get("score"), f"{name}.score", _JUDGE_SHAPE),
        issues=_texts(part.get("issues")),
        suggestions=_texts(part.get("suggestions")),
    )


# ---- the reviewer ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Issue:
    """One issue a reviewer found; `line` is None when it is not about one line."""

    severity: Severity
    file: str
    line: int | None
    description: str
    suggestion: str


@dataclass(frozen=True, slots=True)
class ReviewResult:
    """A reviewer's answer (seed §3.5.2's review JSON), validated."""

    score: float
    issues: tuple[Issue, ...]
    summary: str
    decision: Decision
    auto_fix_possible: bool
    auto_fix_instructions: str

    def severity_counts(self) -> dict[Severity, int]:
        """How many issues of each severity, every severity present, most severe first."""
        return {severity: sum(1 for issue in self.issues if issue.severity == severity)
                for severity in SEVERITIES}


_REVIEW_SHAPE = ('{"review_score": <0-10>, "issues": [{"severity": "critical|high|medium|low", '
                 '"file": "...", "line": <int or null>, "description": "...", "suggestion": '
                 '"..."}], "summary": "...", "decision": "approved" or "needs_revision", '
                 '"auto_fix_possible": <bool>, "auto_fix_instructions": "..."}')


def parse_review(text: str) -> ReviewResult:
    """A reviewer's answer, validated. Raises `AnswerError` saying what was wrong.

    A missing or unknown decision follows the seed's guideline: "needs_revision" when an
    issue is critical or high, else "approved".
    """
    answer = _answer_object(text, _REVIEW_SHAPE, ("review_score", "score", "issues"))
    key = "review_score" if "review_score" in answer else "score"
    issues = tuple(_issue(item) for item in _issue_items(answer.get("issues")))
    return ReviewResult(
        score=_score(answer.get(key), "review_score", _REVIEW_SHAPE),
        issues=issues,
        summary=_text(answer.get("summary")),
        decision=_decision(answer.get("decision"), issues),
        auto_fix_possible=_flag(answer.get("auto_fix_possible")),
        auto_fix_instructions=_text(answer.get("auto_fix_instructions")),
    )


def _issue_items(value: Any) -> list[Any]:
    if isinstance(value, list):
        return [item for item in value if isinstance(item, Mapping | str)]
    return [value] if isinstance(value, Mapping | str) else []


def _issue(item: Mapping[str, Any] | str) -> Issue:
    if isinstance(item, str):
        return Issue("medium", "", None, item.strip(), "")
    severity = _text(item.get("severity")).lower()
    return Issue(
        severity=next((s for s in SEVERITIES if s == severity), "medium"),
        file=_text(item.get("file")),
        line=_line(item.get("line")),
        description=_text(item.get("description")),
        suggestion=_text(item.get("suggestion")),
    )


def _line(value: Any) -> int | None:
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None


_APPROVED = {"approved", "approve", "accept", "accepted", "lgtm"}
_NEEDS_REVISION = {"needs_revision", "revise", "revision", "reject", "rejected",
                   "changes_requested", "request_changes"}


def _decision(value: Any, issues: tuple[Issue, ...]) -> Decision:
    said = re.sub(r"[\s-]+", "_", _text(value).lower())
    if said in _APPROVED:
        return "approved"
    if said in _NEEDS_REVISION:
        return "needs_revision"
    blocking = any(issue.severity in ("critical", "high") for issue in issues)
    return "needs_revision" if blocking else "approved"


def _flag(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "1")
    return value is True or (isinstance(value, int | float) and value == 1)


# ---- shared checks -----------------------------------------------------------------------


def _answer_object(text: str, shape: str, keys: tuple[str, ...]) -> Mapping[str, Any]:
    """The JSON object in an answer (one with any of `keys` first), or an `AnswerError`.

    A broken answer whose only whole objects are fragments of it reports the parse error,
    not the fragment's missing fields.
    """
    found = find_json(text, prefer=lambda v: isinstance(v, dict) and any(k in v for k in keys))
    wanted = isinstance(found.value, dict) and any(k in found.value for k in keys)
    if not found.found or (found.error and not wanted):
        why = f" ({found.error})" if found.error else ""
        raise AnswerError(f"The answer holds no valid JSON{why}. Answer with only the JSON "
                          f"object {shape}, without prose around it.",
                          details={"field": "answer"})
    if not isinstance(found.value, dict):
        raise AnswerError(f"The answer is {_shape(found.value)}, not a JSON object. Answer "
                          f"with only the JSON object {shape}.", details={"field": "answer"})
    return found.value


def _score(value: Any, field: str, shape: str) -> float:
    """A score clamped to 0 to 10 and rounded to one decimal; numeric strings are accepted."""
    number: float | None = None
    if isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            number = None
    if number is None or not math.isfinite(number):
        raise AnswerError(
            f'The answer\'s "{field}" is {_shape(value, missing=value is None)}, not a number '
            f"from 0 to 10. Answer with exactly {shape}.", details={"field": field})
    return round(min(MAX_SCORE, max(0.0, number)), 1)


def _texts(value: Any) -> tuple[str, ...]:
    """A list of strings from a list (of strings or objects), a single string, or nothing."""
    items = value if isinstance(value, list) else [value]
    texts = (_text(item.get("description") or item.get("message") or json.dumps(item))
             if isinstance(item, Mapping) else _text(item) for item in items)
    return tuple(text for text in texts if text)


def _text(value: Any) -> str:
    """A string field: stripped text; numbers are written out, lists joined by lines."""
    if value is None or isinstance(value, bool | Mapping):
        return ""
    if isinstance(value, list):
        return "\n".join(t for t in (_text(item) for item in value) if t)
    return str(value).strip()


def _shape(value: Any, *, missing: bool = False) -> str:
    """How a JSON value reads in a sentence: "missing", "a string ('high')", "a list"…"""
    if missing and value is None:
        return "missing"
    kinds = {bool: "a boolean", int: "a number", float: "a number", str: "a string",
             list: "a list", dict: "an object", type(None): "null"}
    kind = kinds.get(type(value), f"a {type(value).__name__}")
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "…"
        return f"{kind} ({shown})"
    return kind
