"""The `dag` workflow's roles: what the planner and each coding subtask are asked to do."""

from __future__ import annotations

from collections.abc import Sequence

from shoal.engine import planning
from shoal.engine.model import SubtaskRecord, TaskRecord


def instructions_for(task: TaskRecord, sub: SubtaskRecord, tools: Sequence[str]) -> str:
    """The prompt a worker's tool receives for `sub`."""
    if sub.role == "planner":
        return planning.planner_instructions(task.description, dict(task.meta), list(tools))
    return coder_instructions(task, sub)


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
