"""The `dag` workflow's roles: what the planner, each coding subtask and the quality loop's
judge, reviewer and corrections are asked to do."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from shoal.engine import planning
from shoal.engine.model import SERVING_KINDS, StepKind, SubtaskRecord, TaskRecord
from shoal.engine.options import Correction
from shoal.workflows import mentions
from shoal.workflows.document import BuiltinRole, WorkflowDocument

MAX_FILE_CHARS = 6_000  # of each file shown to a judge or reviewer
MAX_FILES_CHARS = 24_000  # of all files together


def instructions_in(
    doc: WorkflowDocument, task: TaskRecord, sub: SubtaskRecord, tools: Sequence[str], *,
    target: SubtaskRecord | None = None, files: Mapping[str, str] | None = None,
    guidance: Sequence[str] = (),
) -> str:
    """The prompt a worker's tool receives for `sub` of a task of `doc`: seed 004's own for a
    built-in role or a quality step, else the run's description (with the problem it was sent
    back with)."""
    role = doc.roles.get(sub.role)
    builtin = role.builtin if role is not None else None
    if (sub.kind in SERVING_KINDS and sub.options.plan_type is None) or builtin is not None:
        return instructions_for(task, sub, tools, target=target, files=files,
                                guidance=guidance, planner=builtin is BuiltinRole.PLANNER)
    return sub.description + (mentions.sent_back(sub.options.repair)
                               if sub.options.repair else "")


def instructions_for(
    task: TaskRecord, sub: SubtaskRecord, tools: Sequence[str], *,
    target: SubtaskRecord | None = None, files: Mapping[str, str] | None = None,
    guidance: Sequence[str] = (), planner: bool = False,
) -> str:
    """The prompt a worker's tool receives for `sub`: the planner's when `planner`, else a
    coding subtask's or a quality step's.

    `target` is the subtask a quality step serves, `files` its files' text (path → text), and
    `guidance` what the user asked to apply to their future subtasks.
    """
    if planner:
        return planning.planner_instructions(task.description, task.meta.requirements, list(tools))
    if sub.kind is StepKind.EVALUATE:
        return f"Evaluate the files produced by '{target.name if target else sub.name}'."
    if sub.kind is StepKind.JUDGE and target is not None:
        return judge_instructions(task, sub, target, files or {})
    if sub.kind is StepKind.REVIEW and target is not None:
        return review_instructions(task, sub, target, files or {})
    text = coder_instructions(task, sub)
    if sub.kind is StepKind.CORRECT:
        text += correction_block(sub.options.correction or Correction(source=""))
    if guidance:
        text += ("\n\nGuidance from your earlier corrections (apply it here too):\n"
                 + "\n".join(f"- {g}" for g in guidance))
    return text


def coder_instructions(task: TaskRecord, sub: SubtaskRecord) -> str:
    """The prompt for one coding subtask of the task's graph."""
    parts = [
        f"Overall task: {task.description}",
        "",
        f"Your subtask: {sub.name}",
        sub.description,
        "",
        "Work in the current directory. Files produced by the subtasks you depend on are "
        "already there. Write every file you create inside this directory, using relative "
        "paths. When you are done, reply with a short summary of what you did.",
    ]
    if sub.error and sub.attempts:
        parts += ["", f"A previous attempt failed: {sub.error}"]
    return "\n".join(parts)


def correction_block(correction: Correction) -> str:
    """What a correction subtask is told on top of the original instructions."""
    parts = ["", "", "# Correction",
             "Your previous work on this subtask is in the current directory. Change it as "
             "asked below; keep the same file names."]
    previous = correction.previous_output.strip()
    if previous:
        parts += ["", "Your previous summary:", previous]
    if correction.issues:
        parts += ["", "Issues a peer review found:"]
        parts += [f"- [{i.get('severity', 'medium')}] {i.get('file') or ''}"
                  f"{':' + str(i['line']) if i.get('line') else ''} {i.get('description', '')}"
                  f"{' — ' + i['suggestion'] if i.get('suggestion') else ''}".replace("  ", " ")
                  for i in correction.issues]
    if correction.instructions:
        parts += ["", f"How to fix it: {correction.instructions}"]
    if correction.guidance:
        kind = correction.correction_type or "other"
        parts += ["", f"Guidance from a person ({kind}): {correction.guidance}"]
    if correction.reference_files:
        parts += ["", "Reference: " + ", ".join(correction.reference_files)]
    return "\n".join(parts)


JUDGE_SCHEMA = ('{"completeness": {"score": <0-10>, "issues": ["..."], "suggestions": ["..."]}, '
                '"architecture": {"score": <0-10>, "issues": ["..."], "suggestions": ["..."]}}')

REVIEW_SCHEMA = """{
  "review_score": <float 0-10>,
  "issues": [{"severity": "critical" | "high" | "medium" | "low", "file": "<filename>",
              "line": <line number or null>, "description": "<issue>",
              "suggestion": "<how to fix>"}],
  "summary": "<1-2 sentence overall assessment>",
  "decision": "approved" | "needs_revision",
  "auto_fix_possible": <boolean>,
  "auto_fix_instructions": "<instructions for auto-fix if possible>"
}"""


def judge_instructions(task: TaskRecord, sub: SubtaskRecord, target: SubtaskRecord,
                       files: Mapping[str, str]) -> str:
    """Ask a model to score completeness and architecture alignment as JSON."""
    parts = [
        "You are Shoal's judge. Role: judge.",
        "Score how COMPLETE the work below is (does it do everything its subtask asked?) and "
        "how well it fits the ARCHITECTURE of the overall task (structure, naming, reuse of "
        "what other subtasks built), each from 0 to 10.",
        "",
        f"Overall task: {task.description}",
        f"Subtask: {target.name}",
        target.description,
        "",
        "The agent's summary:",
        (target.output.text if target.output else "")[:4000],
        "",
        _files_block(files),
        "",
        "Answer with exactly one JSON object and nothing else:",
        JUDGE_SCHEMA,
    ]
    if sub.options.repair:
        parts += ["", "Your previous answer was not valid JSON.",
                  f"The problem: {sub.options.repair}", "Answer again with only the JSON."]
    return "\n".join(parts)


def review_instructions(task: TaskRecord, sub: SubtaskRecord, target: SubtaskRecord,
                        files: Mapping[str, str]) -> str:
    """The seed's peer-review prompt (§3.5.3), for another agent than the author."""
    evaluation = target.evaluation or {}
    parts = [
        "You are Shoal's reviewer. Role: reviewer.",
        "# Code Review Task",
        "You are performing a peer review of code generated by another agent.",
        f"Review cycle: {sub.options.cycle or 1}",
        "",
        "## Original Task",
        f"**Overall task:** {task.description}",
        f"**Subtask:** {target.name}",
        f"**Description:** {target.description}",
        f"**Complexity:** {target.complexity}/5",
        f"**Evaluation Score:** {evaluation.get('overall', 'N/A')}",
        "",
        "## The author's summary",
        (target.output.text if target.output else "")[:4000],
        "",
        "## Files to Review",
        _files_block(files),
        "",
        "## Review Instructions",
        "Analyze the code for correctness (does it fulfil the requirements?), code quality, "
        "best practices, edge cases, performance and security.",
        "",
        "## Output Format",
        "Return a JSON object with this exact structure:",
        REVIEW_SCHEMA,
        "",
        '"approved": no critical or high issues, the code is acceptable. "needs_revision": it '
        "has critical or high issues that need fixing. Scores: 9-10 excellent, 7-8 good with "
        "minor issues, 5-6 acceptable with revisions, 0-4 needs major revisions.",
    ]
    if sub.options.repair:
        parts += ["", "Your previous answer was not valid JSON.",
                  f"The problem: {sub.options.repair}", "Answer again with only the JSON."]
    return "\n".join(parts)


def _files_block(files: Mapping[str, str]) -> str:
    if not files:
        return "(the work produced no files)"
    blocks: list[str] = []
    budget = MAX_FILES_CHARS
    for path, text in sorted(files.items()):
        shown = text[:min(MAX_FILE_CHARS, max(budget, 0))]
        budget -= len(shown)
        cut = "" if len(shown) == len(text) else f"\n[… {len(text) - len(shown)} more characters]"
        blocks.append(f"### {path}\n```\n{shown}{cut}\n```")
    return "\n\n".join(blocks)


def describe_json(value: Any) -> str:
    """Compact JSON for prompts."""
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
