"""Plans: a planner agent's answer (or a user's plan) turned into a validated subtask graph.

`decompose` follows the seed's fallback chain (§3.8): the planner's JSON first; if that is
missing or invalid, a rule template (auth, CRUD, refactor, dashboard); if none matches, a
simple split of the description into its requirements. `Plan.notes` tells the user which
fallback was taken and why.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from shoal.engine.answers import find_json
from shoal.engine.dag import remaining_path_lengths, validate_dag
from shoal.errors import InvalidGraph, InvalidInput

PlanSource = Literal["planner", "template", "simple", "user", "default"]

DEFAULT_COMPLEXITY = 3
MAX_NAME_LENGTH = 200
MAX_SIMPLE_CLAUSES = 8


@dataclass(frozen=True, slots=True)
class PlannedSubtask:
    """One node of a plan; `dependencies` are keys of other subtasks in the same plan."""

    key: str
    name: str
    description: str
    dependencies: tuple[str, ...]
    recommended_tool: str | None
    complexity: int = DEFAULT_COMPLEXITY
    tool: str | None = None  # pinned: only explicit user plans set it


@dataclass(frozen=True, slots=True)
class Plan:
    """A validated list of subtasks, where it came from, and notes on any fallback taken."""

    subtasks: tuple[PlannedSubtask, ...]
    source: PlanSource
    notes: tuple[str, ...] = ()
    # Each subtask's longest chain of subtasks still ahead, itself included, in the order of
    # `subtasks`: found while its items were checked (`_build`), else when asked for.
    lengths: tuple[float, ...] = dataclasses.field(default=(), compare=False)

    def graph(self) -> dict[str, tuple[str, ...]]:
        """The dependency graph, subtask key to the keys it depends on."""
        return {subtask.key: subtask.dependencies for subtask in self.subtasks}

    def path_lengths(self) -> dict[str, float]:
        """Each subtask's key to the length of the longest chain from it (itself included) to
        the end of the plan: the `dag` workflow runs the longest first."""
        if len(self.lengths) == len(self.subtasks):
            return {sub.key: length for sub, length in zip(self.subtasks, self.lengths,
                                                            strict=True)}
        return remaining_path_lengths(self.graph())


@dataclass(frozen=True, slots=True)
class _Draft:
    """One item read from JSON, before its dependencies are resolved."""

    name: str
    description: str
    refs: tuple[Any, ...]
    recommended_tool: str | None
    complexity: int
    tool: str | None


# ---- the planner's answer ----------------------------------------------------------------


def parse_planner_output(text: str, *, max_subtasks: int = 50) -> Plan:
    """Read a planner's answer: a JSON array of subtasks, or an object with a "subtasks" array.

    The JSON may sit in ```json fences or among other text; the first complete array (or
    object with "subtasks") is used. Each item needs "name" and "description"; "dependencies"
    lists 0-based indices or names of other items; "recommended_tool" and "complexity" (1 to 5,
    clamped) are optional. Raises `InvalidGraph` saying what is wrong.
    """
    items = _subtask_items(_extract_json(text))
    subtasks, lengths = _build(items, max_subtasks=max_subtasks, strict=False)
    return Plan(subtasks, "planner", lengths=lengths)


def user_plan(items: Sequence[Mapping[str, Any]], *, max_subtasks: int = 50) -> Plan:
    """Validate a plan submitted with a task: the planner's format plus an optional pinned "tool".

    Stricter than planner output: a wrong type anywhere raises `InvalidGraph` whose `details`
    name the item index and field.
    """
    if isinstance(items, str | bytes) or not isinstance(items, Sequence):
        raise InvalidGraph(
            "The plan must be a list of subtasks, each with a name and a description.",
            details={"field": "plan"},
        )
    subtasks, lengths = _build(list(items), max_subtasks=max_subtasks, strict=True)
    return Plan(subtasks, "user", lengths=lengths)


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


def planner_instructions(
    description: str,
    requirements: Mapping[str, Any] | None,
    tools: Sequence[str],
    *,
    max_subtasks: int = 50,
) -> str:
    """The prompt for the planner subtask (after the seed's decomposition prompt)."""
    tool_list = ", ".join(f'"{tool}"' for tool in tools) or "(none known)"
    return f"""Decompose the following software development task into atomic subtasks.

Task: {description}
Requirements: {json.dumps(_user_requirements(requirements), indent=2, default=str)}

For each subtask, provide:
1. "name": a concise, action-oriented name, unique within the plan
2. "description": what needs to be accomplished, enough to do it without asking
3. "dependencies": a list of 0-based indices of subtasks that must complete first
4. "recommended_tool": one of {tool_list}, or null if any tool will do
5. "complexity": estimated complexity, an integer from 1 to 5

Rules: use at most {max_subtasks} subtasks; dependencies must only point to other subtasks in
the list and must not form a cycle; subtasks without a dependency between them may run in
parallel on different machines, so only add a dependency when one step needs another's result.

Answer ONLY with a JSON array of objects with the keys name, description, dependencies,
recommended_tool and complexity. No prose before or after it.
"""


# ---- finding the JSON --------------------------------------------------------------------


def _extract_json(text: str) -> Any:
    """The first JSON array of objects (or object with "subtasks") in `text`."""
    found = find_json(text, prefer=_looks_like_plan)
    if not found.found or not isinstance(found.value, list | dict):
        raise InvalidGraph(_no_json_message(found.error), details={"field": "planner_output"})
    return found.value


def _no_json_message(error: str | None) -> str:
    if error is None:
        return "Planner output was not valid JSON: it holds no JSON array of subtasks."
    return f"Planner output was not valid JSON ({error})."


def _looks_like_plan(value: Any) -> bool:
    if isinstance(value, list):
        return all(isinstance(item, dict) for item in value)
    return isinstance(value, dict) and "subtasks" in value


def _subtask_items(value: Any) -> list[Any]:
    if isinstance(value, list):
        return value
    if isinstance(value, dict) and isinstance(value.get("subtasks"), list):
        return list(value["subtasks"])
    shape = "an object without a \"subtasks\" array" if isinstance(value, dict) else (
        _json_kind(value)
    )
    raise InvalidGraph(
        f"Planner output must be a JSON array of subtasks (or an object with a \"subtasks\" "
        f"array), but it was {shape}.",
        details={"field": "planner_output"},
    )


# ---- items to subtasks -------------------------------------------------------------------


def _build(
    items: list[Any], *, max_subtasks: int, strict: bool
) -> tuple[tuple[PlannedSubtask, ...], tuple[float, ...]]:
    """Validate items and resolve dependencies; keys are s1, s2, … in order. With them, each
    subtask's longest chain ahead (`Plan.lengths`), found by the same pass that checks the
    graph has no cycle."""
    who = "The plan" if strict else "Planner output"
    if not items:
        raise InvalidGraph(f"{who} has no subtasks; a plan needs at least one.",
                           details={"subtasks": 0})
    if len(items) > max_subtasks:
        raise InvalidGraph(
            f"{who} has {len(items)} subtasks; the limit is {max_subtasks}. "
            "Merge small steps into larger ones.",
            details={"subtasks": len(items), "max_subtasks": max_subtasks},
        )
    drafts = [_read_item(item, at, strict=strict) for at, item in enumerate(items)]
    index = _name_index(drafts)
    deps = _resolved(drafts, index)
    lengths = _path_lengths(deps)
    if lengths is None:  # a cycle, or a subtask depending on itself: say which
        _validate_graph(drafts, deps, who=who, max_subtasks=max_subtasks)
        raise InvalidGraph(f"{who} has invalid dependencies.", details={"field": "dependencies"})
    keys = [f"s{at + 1}" for at in range(len(drafts))]
    key_of = keys.__getitem__
    return tuple([
        PlannedSubtask(
            key=keys[at],
            name=draft.name,
            description=draft.description,
            dependencies=tuple(map(key_of, deps[at])),
            recommended_tool=draft.recommended_tool,
            complexity=draft.complexity,
            tool=draft.tool,
        )
        for at, draft in enumerate(drafts)
    ]), tuple(lengths)


def _resolved(drafts: list[_Draft], index: Mapping[str, int]) -> list[list[int]]:
    """Each draft's dependencies as indices, without repeats, in order. A plan's usual
    reference (an index in range, or a subtask's exact name) is resolved here without a
    call; anything else by `_resolve_ref`, which also says what is wrong."""
    count, out = len(drafts), []
    for at, draft in enumerate(drafts):
        found: list[int] = []
        for ref in draft.refs:
            if ref.__class__ is int and 0 <= ref < count:
                found.append(ref)
            elif ref.__class__ is str and (hit := index.get(ref)) is not None:
                found.append(hit)
            else:
                found.append(_resolve_ref(ref, at, index, count))
        out.append(list(dict.fromkeys(found)) if len(found) > 1 else found)
    return out


def _path_lengths(deps: list[list[int]]) -> list[float] | None:
    """For each subtask, the number of subtasks on the longest chain from it to the end of the
    plan (itself included); None when the dependencies hold a cycle. One pass of Kahn's
    algorithm over indices, then one back over its order: no call per subtask."""
    count = len(deps)
    users: list[list[int]] = [[] for _ in deps]
    waiting = [len(d) for d in deps]
    for at, own in enumerate(deps):
        for dep in own:
            users[dep].append(at)
    order = [at for at in range(count) if not waiting[at]]
    for node in order:  # grows as it goes: each subtask once its dependencies are in it
        for user in users[node]:
            waiting[user] -= 1
            if not waiting[user]:
                order.append(user)
    if len(order) < count:
        return None
    length = [1.0] * count
    for node in reversed(order):
        longest = 0.0
        for user in users[node]:
            if length[user] > longest:
                longest = length[user]
        length[node] = 1.0 + longest
    return length


def _read_item(item: Any, at: int, *, strict: bool) -> _Draft:
    if item.__class__ is dict:  # the usual item, every field of the usual type: read here
        get = item.get
        name, text, refs = get("name"), get("description"), get("dependencies")
        hint, complexity = get("recommended_tool"), get("complexity")
        tool = get("tool") if strict else None
        if (name.__class__ is str and text.__class__ is str
                and (refs is None or refs.__class__ is list)
                and (hint is None or hint.__class__ is str)
                and (complexity is None or (complexity.__class__ is int and 1 <= complexity <= 5))
                and (tool is None or tool.__class__ is str)):
            name, text = name.strip(), text.strip()
            if name and text and len(name) <= MAX_NAME_LENGTH:
                return _Draft(name=name, description=text, refs=tuple(refs) if refs else (),
                              recommended_tool=hint.strip() or None if hint else None,
                              complexity=DEFAULT_COMPLEXITY if complexity is None
                              else complexity,
                              tool=tool.strip() or None if tool else None)
        # else: read field by field below, which says what is wrong
    if item.__class__ is not dict and not isinstance(item, Mapping):  # a dict without the ABC
        raise _item_error(at, None, f"is {_json_kind(item)}, not an object with a name and "
                          "a description")
    name = _required_text(item, at, "name", strict=strict)
    refs = item.get("dependencies")
    if refs is None:
        refs = []
    if not isinstance(refs, list | tuple):
        raise _item_error(at, "dependencies", "has \"dependencies\" that is not a list of "
                          "indices or names")
    return _Draft(
        name=name,
        description=_required_text(item, at, "description", strict=True),
        refs=tuple(refs),
        recommended_tool=_optional_text(item, at, "recommended_tool", strict=strict),
        complexity=_complexity(item.get("complexity"), at, strict=strict),
        tool=_optional_text(item, at, "tool", strict=True) if strict else None,
    )


def _required_text(item: Mapping[str, Any], at: int, field: str, *, strict: bool) -> str:
    value = item.get(field)
    if value.__class__ is not str and not isinstance(value, str):  # the class: no call
        raise _item_error(at, field, f"needs a non-empty \"{field}\" string")
    value = value.strip()
    if not value:
        raise _item_error(at, field, f"needs a non-empty \"{field}\" string")
    if field == "name" and len(value) > MAX_NAME_LENGTH:
        if strict:
            raise _item_error(at, field, f"has a name longer than {MAX_NAME_LENGTH} characters")
        value = value[: MAX_NAME_LENGTH - 1].rstrip() + "…"
    return value


def _optional_text(item: Mapping[str, Any], at: int, field: str, *, strict: bool) -> str | None:
    value = item.get(field)
    if value is None:
        return None
    if isinstance(value, str):
        return value.strip() or None
    if not strict:
        return None
    raise _item_error(at, field, f"has a \"{field}\" that is not a tool name (a string)")


def _complexity(value: Any, at: int, *, strict: bool) -> int:
    """1 to 5; the planner's odd values are clamped or defaulted, a user's are refused."""
    if value is None:
        return DEFAULT_COMPLEXITY
    plain = value.__class__ is int  # told by its class, without a call
    if (plain or (isinstance(value, int) and not isinstance(value, bool))) and 1 <= value <= 5:
        number: int = value
        return number
    if strict:
        raise _item_error(at, "complexity", "has a \"complexity\" that is not a whole number "
                          "from 1 to 5")
    try:
        number = round(float(value))
    except (TypeError, ValueError, OverflowError):
        return DEFAULT_COMPLEXITY
    return min(5, max(1, number))


def _name_index(drafts: list[_Draft]) -> dict[str, int]:
    """Case-insensitive name → index; two subtasks may not share a name."""
    index: dict[str, int] = {}
    for at, draft in enumerate(drafts):
        folded = draft.name.casefold()
        if folded in index:
            first = index[folded]
            raise InvalidGraph(
                f"Subtasks at indices {first} and {at} are both named {draft.name!r}. "
                "Give every subtask a unique name.",
                details={"field": "name", "indices": [first, at], "name": draft.name},
            )
        index[folded] = at
    return index


def _resolve_ref(ref: Any, at: int, index: Mapping[str, int], count: int) -> int:
    plain = ref.__class__ is int  # told by its class, without a call
    if (plain or (isinstance(ref, int) and not isinstance(ref, bool))) and 0 <= ref < count:
        index_of: int = ref
        return index_of
    if isinstance(ref, str):
        found = index.get(ref.strip().casefold())
        if found is not None:
            return found
        digits = ref.strip()
        if digits.isascii() and digits.isdigit() and len(digits) < 10 and int(digits) < count:
            return int(digits)
    raise InvalidGraph(
        f"Subtask at index {at} depends on {ref!r}, which is neither an index (0 to "
        f"{count - 1}) nor the name of a subtask in the plan. Fix or remove that dependency.",
        details={"index": at, "field": "dependencies", "reference": ref},
    )


def _validate_graph(
    drafts: list[_Draft], deps: list[list[int]], *, who: str, max_subtasks: int
) -> None:
    graph = {draft.name: [drafts[dep].name for dep in deps[at]]
             for at, draft in enumerate(drafts)}
    try:
        validate_dag(graph, max_nodes=max_subtasks)
    except InvalidGraph as exc:
        raise InvalidGraph(f"{who} has invalid dependencies. {exc.message}",
                           details=exc.details) from exc


def _json_kind(value: Any) -> str:
    """How a JSON value reads in a sentence: "a number", "a string"…"""
    kinds = {bool: "a boolean", int: "a number", float: "a number", str: "a string",
             list: "a list", dict: "an object", type(None): "null"}
    return kinds.get(type(value), f"a {type(value).__name__}")


def _item_error(at: int, field: str | None, problem: str) -> InvalidGraph:
    return InvalidGraph(
        f"Subtask at index {at} {problem}.",
        details={"index": at, "field": field},
    )


# ---- rule templates ----------------------------------------------------------------------

_Row = tuple[str, str, tuple[int, ...], int]  # name, description, dependency indices, complexity


def _user_requirements(requirements: Mapping[str, Any] | None) -> dict[str, Any]:
    """The user's requirements, without Shoal's own keys (`shoal.*`) kept beside them."""
    return {k: v for k, v in (requirements or {}).items() if not str(k).startswith("shoal.")}


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
