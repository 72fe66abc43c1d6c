"""Shoal's own checks of a typed plan's answer (`check` on a plan type; `plan_types`): code, not a
model, run on a worker that holds the task's sources (the `citations` tool).

`check: citations` on the type that writes the result: once a run of it has answered (and
passed its gate, if it has one), a `check` subtask reads the result file and checks each cited
sentence — its citation resolves, its quote is in the cited passage, its figures, dates and
names are in the quote (or in the rows its SQL returns when run again). The sentences that fail
go back to the writer once, with the reasons (`repair_prompt`); the check then runs again and its
report stands: what still fails is removed and listed under the report's `## Citation check`,
whose figures (citation precision and resolution) the check computed. Its answer is JSON
(`failures`, `figures` read it): the task's detail and `task_complete` show those figures.

The check is told the question's parts as the engine counted them (`questions`), so that the
report's Gaps section is exactly the parts not answered.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from shoal.engine import answers
from shoal.engine.model import StepKind, StepOutput, SubtaskRecord, TaskRecord
from shoal.states import SubtaskStatus
from shoal.workflows import partial_report, questions
from shoal.workflows.reserve import SHORT

ROLE = "checker"  # the role name a check subtask carries (no document role: Shoal's own)
TOOL = "citations"  # the worker tool that runs it
REPAIRS = 1  # times failed sentences go back to the writer before they are removed
FIGURES = ("cited", "supported", "precision", "citations", "resolved", "resolution")
MAX_REPAIR_ANSWER_CHARS = 12_000


def instructions(task: TaskRecord, subtasks: Iterable[SubtaskRecord], result_file: str, *,
                 partial: str | None = None) -> str:
    """What the `citations` tool is told: the file to check, the question, its parts, and
    the line a partial report begins with (tasks were skipped for the budget)."""
    found = questions.status(subtasks)
    return json.dumps({"check": "citations", "file": result_file,
                       "question": task.description,
                       "questions": questions.summary(found) if found else None,
                       "partial": partial}, ensure_ascii=False)


def partial(runs: Iterable[SubtaskRecord]) -> str | None:
    """The first line of the report of a plan whose `runs` were partly skipped for the
    budget (`partial_report`), or None."""
    skipped = [r.name for r in runs if r.options.gap and SHORT in r.options.gap]
    return partial_report.header(skipped=skipped) if skipped else None


def read(output: StepOutput) -> StepOutput:
    """A check's output with its JSON answer read (kept as its text when it is not JSON)."""
    value = answers.find_json(output.text, prefer=lambda v: isinstance(v, dict)).value \
        if output.text else None
    return replace(output, answers=True, parsed=value) if isinstance(value, dict) else output


def failures(output: StepOutput) -> list[Mapping[str, Any]]:
    """The sentences a check failed (`{"sentence", "reason", …}` each)."""
    parsed = output.parsed if output.answers else None
    failed = parsed.get("failed") if isinstance(parsed, Mapping) else None
    return [f for f in failed if isinstance(f, Mapping)] if isinstance(failed, list) else []


def repair_prompt(description: str, answer: str, failed: list[Mapping[str, Any]]) -> str:
    """The writer's prompt again, told what the check failed and why."""
    reasons = "\n".join(f"- \"{f.get('sentence', '')}\": {f.get('reason', '')}" for f in failed)
    return (f"{description}\n\n# Another try\nShoal's citation check (code, not a model) "
            "found cited sentences that what they cite does not support:\n"
            f"{reasons}\nFix each so that its cited passage (or its SQL's rows) holds every "
            "figure, date and name it states, quoting the passage exactly in Sources, or "
            "remove it. Keep every other sentence and citation as it is.\n\n"
            f"Your previous answer:\n{answer[:MAX_REPAIR_ANSWER_CHARS]}")


def figures(subtasks: Iterable[SubtaskRecord]) -> dict[str, Any] | None:
    """The figures of the task's last completed check: citation precision and resolution as
    the code computed them, and the sentences it removed (None: nothing was checked)."""
    done = [s for s in subtasks if s.kind is StepKind.CHECK
            and s.status is SubtaskStatus.COMPLETED and s.output is not None]
    if not done:
        return None
    last = max(done, key=lambda s: (s.completed_at or s.created_at, s.key))
    parsed = last.output.parsed if last.output is not None and last.output.answers else None
    if not isinstance(parsed, Mapping):
        return None
    out = {k: parsed[k] for k in FIGURES if isinstance(parsed.get(k), int | float)}
    removed = parsed.get("removed")
    if isinstance(removed, list):
        out["removed"] = [r for r in removed if isinstance(r, Mapping)]
    return out
