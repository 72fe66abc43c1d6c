"""Plans: a planner agent's answer (or a user's plan) turned into a validated subtask graph.

What a plan is, the planner's prompt, and the reading and checking of its answer or of a
user's own plan; when the planner's answer cannot be read, `engine.fallback_plans` makes one.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from shoal.engine.answers import find_json
from shoal.engine.dag import remaining_path_lengths, validate_dag
from shoal.errors import InvalidGraph

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


def _user_requirements(requirements: Mapping[str, Any] | None) -> dict[str, Any]:
    """The user's requirements, without Shoal's own keys (`shoal.*`) kept beside them."""
    return {k: v for k, v in (requirements or {}).items() if not str(k).startswith("shoal.")}
