"""The seed's fallback chain for a task's plan (§3.8), `decompose`: the planner's JSON first;
if that is missing or invalid, a rule template (auth, CRUD, refactor, dashboard); if none
matches, a simple split of the description into its requirements. `Plan.notes` tells the user
which fallback was taken and why.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from shoal.engine.planning import (
    DEFAULT_COMPLEXITY,
    MAX_SIMPLE_CLAUSES,
    Plan,
    PlannedSubtask,
    parse_planner_output,
)
from shoal.errors import InvalidInput


def decompose(
    planner_text: str | None,
    description: str,
    requirements: Mapping[str, Any] | None = None,
    *,
    max_subtasks: int = 50,
) -> Plan:
    """The task's plan: the planner's answer, else a rule template, else a simple split.

    `planner_text` is None when the planner failed or timed out. The returned plan's notes
    say why a fallback was used.
    """
    if planner_text is None:
        reason = "The planner gave no answer (it failed or timed out)."
    else:
        try:
            return parse_planner_output(planner_text, max_subtasks=max_subtasks)
        except InvalidInput as exc:
            reason = exc.message
    found = _match_template(description, requirements or {})
    if found is not None and len(found[1].subtasks) <= max_subtasks:
        name, plan = found
        return dataclasses.replace(plan, notes=(f"{reason} Used the {name!r} template instead.",))
    plan = simple_plan(description, max_subtasks=max_subtasks)
    note = (
        f"{reason} No template matched, so the task was split by its requirements into "
        f"{len(plan.subtasks)} subtask{'s' if len(plan.subtasks) != 1 else ''}."
    )
    return dataclasses.replace(plan, notes=(note,))


# ---- rule templates ----------------------------------------------------------------------

_Row = tuple[str, str, tuple[int, ...], int]  # name, description, dependency indices, complexity


def template_plan(description: str, requirements: Mapping[str, Any] | None = None) -> Plan | None:
    """The seed's rule template matching the description (auth, CRUD, refactor, dashboard).

    Matching is on whole words, so "build" or "guide" do not count as "ui". None if no
    template matches.
    """
    found = _match_template(description, requirements or {})
    return None if found is None else found[1]


def _match_template(
    description: str, requirements: Mapping[str, Any]
) -> tuple[str, Plan] | None:
    for name, pattern, rows in _TEMPLATES:
        if pattern.search(description):
            plan = Plan(_rows_to_subtasks(rows(requirements)), "template",
                        notes=(f"Used the {name!r} template.",))
            return name, plan
    return None


def _rows_to_subtasks(rows: Sequence[_Row]) -> tuple[PlannedSubtask, ...]:
    names = _unique_names([row[0] for row in rows])
    return tuple(
        PlannedSubtask(
            key=f"s{at + 1}",
            name=names[at],
            description=text,
            dependencies=tuple(f"s{dep + 1}" for dep in deps),
            recommended_tool=None,
            complexity=complexity,
        )
        for at, (name, text, deps, complexity) in enumerate(rows)
    )


def _unique_names(names: list[str]) -> list[str]:
    """Names made unique (case-insensitively) by numbering repeats: "Add tests (2)"."""
    seen: set[str] = set()
    result: list[str] = []
    for name in names:
        candidate, n = name, 1
        while candidate.casefold() in seen:
            n += 1
            candidate = f"{name} ({n})"
        seen.add(candidate.casefold())
        result.append(candidate)
    return result


def _auth_rows(requirements: Mapping[str, Any]) -> list[_Row]:
    return [
        ("Create User model and database schema",
         "Define the User model with fields (id, username, email, password_hash). "
         "Create the migration.", (), 2),
        ("Implement password hashing utility",
         "Create functions for hashing and verifying passwords using bcrypt.", (), 2),
        ("Create user registration endpoint",
         "POST /auth/register endpoint with validation and password hashing.", (0, 1), 3),
        ("Create login endpoint with JWT",
         "POST /auth/login endpoint that returns a JWT on successful authentication.",
         (0, 1), 3),
        ("Create authentication middleware",
         "Middleware that verifies JWTs and protects routes.", (3,), 3),
        ("Write tests for auth system",
         "Unit and integration tests for registration, login and protected routes.",
         (2, 3, 4), 3),
    ]


def _crud_rows(requirements: Mapping[str, Any]) -> list[_Row]:
    raw = requirements.get("resource_name")
    resource = raw.strip() if isinstance(raw, str) and raw.strip() else "Resource"
    path = "/" + (re.sub(r"[^a-z0-9]+", "-", resource.lower()).strip("-") or "resource") + "s"
    return [
        (f"Create {resource} model and schema",
         f"Define the {resource} SQLAlchemy model and Pydantic schemas.", (), 2),
        (f"Implement GET {path} endpoint",
         f"List all {resource}s with pagination and filtering.", (0,), 2),
        (f"Implement POST {path} endpoint", f"Create a new {resource} with validation.", (0,), 3),
        (f"Implement GET {path}/{{id}} endpoint",
         f"Get a single {resource} by id, with 404 handling.", (0,), 2),
        (f"Implement PUT {path}/{{id}} endpoint", f"Update an existing {resource}.", (0,), 3),
        (f"Implement DELETE {path}/{{id}} endpoint",
         f"Delete a {resource}, cascading if needed.", (0,), 2),
        (f"Write tests for {resource} CRUD",
         "Test all CRUD operations, including edge cases.", (1, 2, 3, 4, 5), 3),
    ]


def _refactor_rows(requirements: Mapping[str, Any]) -> list[_Row]:
    return [
        ("Analyse the current code",
         "Read the code to be refactored; map its modules, dependencies and tests, and list "
         "the problems the refactor should fix.", (), 2),
        ("Plan the refactoring",
         "Write a step-by-step plan of the changes that keeps behaviour identical; note "
         "risky areas and the tests that cover them.", (0,), 2),
        ("Apply the refactoring",
         "Make the planned changes in small steps, keeping the code working after each.",
         (1,), 4),
        ("Update the tests",
         "Adjust tests to the new structure and add tests for behaviour that was untested.",
         (2,), 3),
        ("Verify behaviour is unchanged",
         "Run the full test suite and linters, compare behaviour before and after, and "
         "summarise what changed.", (2, 3), 2),
    ]


def _dashboard_rows(requirements: Mapping[str, Any]) -> list[_Row]:
    return [
        ("Design the dashboard layout",
         "Create the page layout: navigation, grid and responsive breakpoints for the "
         "dashboard's panels.", (), 2),
        ("Build the data API client",
         "Write a client for the backend endpoints the dashboard reads, with typed "
         "responses, loading states and error handling.", (), 3),
        ("Implement widgets and charts",
         "Build the dashboard's widgets and charts inside the layout, fed by the data "
         "client.", (0, 1), 3),
        ("Wire up state management",
         "Connect widgets to the data client through shared state: fetching, caching, "
         "refresh and filters.", (1, 2), 3),
        ("Write tests for the dashboard",
         "Component and integration tests for the widgets, the state and the data client.",
         (2, 3), 3),
    ]


_TEMPLATES: tuple[tuple[str, re.Pattern[str], Callable[[Mapping[str, Any]], list[_Row]]], ...] = (
    ("auth", re.compile(r"\bauth\b|\bauthenticat", re.IGNORECASE), _auth_rows),
    ("crud", re.compile(r"\bcrud\b|\bapi endpoints?\b", re.IGNORECASE), _crud_rows),
    ("refactor", re.compile(r"\brefactor", re.IGNORECASE), _refactor_rows),
    ("dashboard", re.compile(r"\bdashboards?\b|\bui\b", re.IGNORECASE), _dashboard_rows),
)


# ---- the last resort ---------------------------------------------------------------------

_BULLET = re.compile(r"^(?:[-*•+]|\d+[.)])\s+(.+)$")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])")
_TITLE_LENGTH = 80
_INTEGRATE = (
    "Integrate and verify",
    "Bring the results of the other subtasks together, check that every requirement of the "
    "task is met, and fix what is missing.",
)


def simple_plan(description: str, *, max_subtasks: int = MAX_SIMPLE_CLAUSES + 1) -> Plan:
    """One subtask per requirement clause, plus "Integrate and verify" when there are several.

    Clauses are bullet or numbered lines if the description has any (other lines become
    context), else its sentences; at most 8 (the rest are merged into the eighth), and fewer
    when `max_subtasks` is smaller. The clause subtasks are independent.
    """
    clauses, context = _clauses(description)
    clauses = _merge_tail(clauses, max(1, min(MAX_SIMPLE_CLAUSES, max_subtasks - 1)))
    if len(clauses) <= 1:
        text = description.strip() or "Complete the task."
        return Plan(_rows_to_subtasks([(_title(text), text, (), DEFAULT_COMPLEXITY)]), "simple")
    suffix = f"\n\nPart of the task: {context}" if context else ""
    rows: list[_Row] = [
        (_title(clause), clause + suffix, (), DEFAULT_COMPLEXITY) for clause in clauses
    ]
    rows.append((*_INTEGRATE, tuple(range(len(clauses))), 2))
    return Plan(_rows_to_subtasks(rows), "simple")


def _clauses(description: str) -> tuple[list[str], str]:
    """Requirement clauses and the context lines around them."""
    lines = [line.strip() for line in description.splitlines() if line.strip()]
    bullets = [m.group(1).strip() for line in lines if (m := _BULLET.match(line))]
    if bullets:
        return bullets, " ".join(line for line in lines if not _BULLET.match(line))
    text = " ".join(lines)
    return [s.strip() for s in _SENTENCE_END.split(text) if s.strip()], ""


def _merge_tail(clauses: list[str], cap: int) -> list[str]:
    if len(clauses) <= cap:
        return clauses
    return [*clauses[: cap - 1], "\n".join(clauses[cap - 1:])]


def _title(text: str) -> str:
    """A subtask name from a clause: its first line, without end punctuation, at most 80."""
    line = text.splitlines()[0].strip().rstrip(".!?;:,") or "Complete the task"
    line = line[0].upper() + line[1:]
    if len(line) <= _TITLE_LENGTH:
        return line
    cut = line[: _TITLE_LENGTH - 1].rsplit(" ", 1)[0]
    return cut.rstrip(" ,;:") + "…"
