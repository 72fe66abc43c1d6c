"""A result that says it is partial, whatever model wrote it: the report of a typed plan with
`reserved` types, when the budget made the task leave something out.

- When tasks were skipped for the budget and the report was written anyway, it is marked: it
  begins with a `PARTIAL` line naming what was skipped, and its Gaps section (added when it has
  none) names each of them (`marked`).
- When the budget ran out before the report was written, Shoal writes one itself, without a
  model (`from_findings`): the `PARTIAL` line, the question, what each completed task found —
  every object of an answer that holds a `citation` is a finding, listed with its number, the
  citations under Sources — and a Gaps section naming each task skipped, failed or not
  finished.

`when_out` and `when_done` write it (`Step.write_file`: the runtime stores the file as a new
version of the result's run's), for the runs of one plan; the rest is pure text.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from shoal.engine.model import SubtaskRecord
from shoal.engine.step import Step
from shoal.events import EventType
from shoal.states import SubtaskStatus
from shoal.workflows.blackboard import answer_of
from shoal.workflows.plan_types import PlanType
from shoal.workflows.reserve import SHORT

PARTIAL = "Partial report:"
MAX_ANSWER_CHARS = 4_000  # of one task's answer, when it holds no findings to list
_GAPS = re.compile(r"^(#{1,6})[ \t]+Gaps\b.*$", flags=re.MULTILINE | re.IGNORECASE)


Kinds = Callable[[SubtaskRecord], PlanType | None]  # a planned run's type


def when_out(step: Step, runs: Sequence[SubtaskRecord], kind_of: Kinds, filename: str,
             ran_out: str) -> None:
    """The budget ran out (`ran_out`: what was spent of which limit): the result file of the
    plan's `runs`, written from what is done — the last report written, marked; else one
    written from the findings."""
    writers = [r for r in runs if (k := kind_of(r)) is not None and k.writes_result]
    if not writers:
        return
    written = [w for w in writers if _answered(w)]
    skipped = [r for r in runs if r.options.gap and SHORT in r.options.gap]
    unfinished = [r for r in runs if r.status is not SubtaskStatus.COMPLETED]
    names = [r.name for r in skipped], [r.name for r in unfinished]
    if written:
        first = header(skipped=names[0], unfinished=names[1], ran_out=ran_out)
        gaps = [(r.name, r.options.gap or "") for r in skipped] + [
            (r.name, "not finished: the budget ran out first") for r in unfinished
            if r not in writers]
        text = marked(str(answer_of(written[-1]) or ""), first, gaps)
    else:
        first = header(skipped=names[0], unfinished=names[1], ran_out=ran_out, by_shoal=True)
        text = from_findings(step.task.description, first, [
            Outcome(r.name, answer_of(r) if _answered(r) else None, r.options.gap)
            for r in runs if r not in writers])
    step.write_file(written[-1] if written else writers[0], filename, text)
    step.emit(EventType.NOTICE, level="warning", partial=True, message=(
        f"The budget ran out before the result was finished: {filename} is written from what "
        "was done" + (" (the last report written, marked partial)." if written else
                      ", by Shoal, without a model.")))


def when_done(step: Step, runs: Sequence[SubtaskRecord], kind_of: Kinds,
              filename: str) -> None:
    """The plan is done: if any of its `runs` was skipped for the budget, its result file
    (the last report written) is marked partial."""
    skipped = [r for r in runs if r.options.gap and SHORT in r.options.gap]
    written = [r for r in runs if (k := kind_of(r)) is not None and k.writes_result
               and _answered(r)]
    if not skipped or not written:
        return
    report = str(answer_of(written[-1]) or "")
    text = marked(report, header(skipped=[r.name for r in skipped]),
                  [(r.name, r.options.gap or "") for r in skipped])
    if text.strip() != report.strip():
        step.write_file(written[-1], filename, text)


def _answered(run: SubtaskRecord) -> bool:
    return run.status is SubtaskStatus.COMPLETED and not run.options.gap and \
        run.output is not None


@dataclass(frozen=True, slots=True)
class Outcome:
    """What became of one task of the plan: its answer (a JSON value, or text) when it
    completed with one; why it is a gap when it is one; neither when it never finished."""

    name: str
    answer: Any = None
    gap: str | None = None


def header(*, skipped: Sequence[str], unfinished: Sequence[str] = (), ran_out: str = "",
           by_shoal: bool = False) -> str:
    """The first paragraph of a partial report: why it is partial and what is missing."""
    if not ran_out:
        said = "the task's budget could not cover every task of its plan."
    elif by_shoal:
        said = (f"the task's budget ran out ({ran_out}) before its report was written, so "
                "Shoal wrote this one from what was done, without a model.")
    else:
        said = f"the task's budget ran out ({ran_out}) before the report was finished."
    parts = [PARTIAL, said]
    if skipped:
        parts.append(f"Skipped: {', '.join(skipped)}.")
    if unfinished:
        parts.append(f"Not finished: {', '.join(unfinished)}.")
    return " ".join(parts)


def marked(report: str, first: str, gaps: Sequence[tuple[str, str]]) -> str:
    """`report` beginning with the paragraph `first` (unless it begins with `PARTIAL`
    already), its Gaps section naming each of `gaps` (name, why) that it does not name."""
    text = report.strip("\n")
    found = _GAPS.search(text)
    section = ""
    if found is not None:
        rest = text[found.end():]
        end = re.search(rf"^#{{1,{len(found.group(1))}}}[ \t]", rest, flags=re.MULTILINE)
        section = rest[:end.start()] if end else rest
    missing = [f"- {name}: {why}." for name, why in gaps if name not in section]
    if missing and found is not None:
        text = text[:found.end()] + "\n\n" + "\n".join(missing) + text[found.end():]
    elif missing:
        text += "\n\n## Gaps\n\n" + "\n".join(missing)
    if not text.lstrip().startswith(PARTIAL):
        text = f"{first}\n\n{text}"
    return text + "\n"


def from_findings(question: str, first: str, outcomes: Sequence[Outcome]) -> str:
    """A report written from what the completed tasks found, in plan order."""
    numbers: dict[str, int] = {}
    lines = [first, "", f"# {question.strip() or 'Report'}", "", "## Findings", ""]
    answered = [o for o in outcomes if o.gap is None and o.answer is not None]
    for outcome in answered:
        lines += [f"### {outcome.name}", "", *_found(outcome.answer, numbers), ""]
    if not answered:
        lines += ["No task finished before the budget ran out.", ""]
    missing = [f"- {o.name}: {o.gap}." if o.gap is not None else
               f"- {o.name}: not finished: the budget ran out first."
               for o in outcomes if o.gap is not None or o.answer is None]
    lines += ["## Gaps", "", *(missing or ["- None."]), "", "## Sources", ""]
    lines += [f"[{n}] {citation}" for citation, n in numbers.items()] or ["None cited."]
    return "\n".join(lines) + "\n"


def _found(answer: Any, numbers: dict[str, int]) -> list[str]:
    """An answer as Markdown: its findings, each cited by number; else the answer itself."""
    if isinstance(answer, str) and answer.lstrip()[:1] in ("{", "["):
        with contextlib.suppress(ValueError):  # a JSON answer of a role with no contract
            answer = json.loads(answer)
    if isinstance(answer, str):
        return [answer.strip()[:MAX_ANSWER_CHARS] or "(an empty answer)"]
    cited = list(_cited(answer))
    if not cited:
        shown = json.dumps(answer, ensure_ascii=False, indent=1)[:MAX_ANSWER_CHARS]
        return ["It found nothing it could cite; its answer:", "", "```json", shown, "```"]
    found = []
    for text, citation in cited:
        number = numbers.setdefault(citation, len(numbers) + 1)
        found.append(f"- {text} [{number}]")
    return found


def _cited(value: Any) -> list[tuple[str, str]]:
    """Every object in `value` with a `citation`: (what it says, its citation)."""
    if isinstance(value, list):
        return [pair for item in value for pair in _cited(item)]
    if not isinstance(value, dict):
        return []
    citation = value.get("citation")
    if isinstance(citation, str) and citation.strip():
        text = value.get("text")
        if not isinstance(text, str) or not text.strip():
            text = "; ".join(str(v) for k, v in value.items()
                             if k != "citation" and isinstance(v, str | int | float))
        return [(" ".join(text.split()), citation.strip())]
    return [pair for item in value.values() for pair in _cited(item)]
