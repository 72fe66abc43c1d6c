"""What a `route` step decides, and the rules the engine holds it to (seed 001's supervisor).

A router role names the next step after every step it picked; the engine takes the name only
if it keeps the route's rules, whatever the model says:
- only a step among the route's `choices` that the plan lists (the `plan` entry: a list of
  names, or a mapping whose true keys name them, `use_` prefixes allowed), or its `finish`;
- a choice runs after every planned choice it `requires`, and never when one of those failed
  (it is skipped, with the reason);
- a choice runs once, unless it is `repeatable`;
- at most `max_hops` decisions; then the route goes to `finish`.
An answer that breaks a rule, names nothing or names an unknown step is replaced by the
fallback: the first planned choice, in the plan's order, that may run now; `finish` when none
may. Every decision says who made it and, when the engine overruled the router, why.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from shoal.engine import answers
from shoal.workflows.document import StepDoc


class DecidedBy(StrEnum):
    ROUTER = "router"  # the router's answer was taken
    FALLBACK = "fallback"  # the router's answer broke a rule; the engine chose
    ENGINE = "engine"  # the router was not asked: nothing left to choose, or the hop cap


@dataclass(frozen=True, slots=True)
class Decision:
    """The next step of a route, and why."""

    next: str
    by: DecidedBy
    asked: str | None = None  # the step the router named, if it named one
    reason: str | None = None  # why the engine chose instead of the router

    def wire(self) -> dict[str, Any]:
        return {"next": self.next, "by": self.by.value, "asked": self.asked,
                "reason": self.reason}


@dataclass(frozen=True, slots=True)
class RouteState:
    """What a route knows when it decides."""

    planned: tuple[str, ...]  # the choices the plan lists, in its order
    ran: tuple[str, ...]  # the choices that completed a run, in the order they ran
    failed: frozenset[str]  # the choices whose latest run failed


def planned_choices(route: StepDoc, plan: Any) -> tuple[str, ...]:
    """The route's choices that `plan` lists (every choice when the route has no plan)."""
    if route.plan is None:
        return tuple(route.choices)
    if isinstance(plan, Mapping):
        names = [str(k).removeprefix("use_") for k, v in plan.items() if v is True]
    elif isinstance(plan, list):
        names = [str(v).strip().lower() for v in plan if isinstance(v, str)]
    else:
        names = []
    found: list[str] = []
    for name in names:
        if name in route.choices and name not in found:
            found.append(name)
    return tuple(found)


def skipped(route: StepDoc, state: RouteState) -> dict[str, str]:
    """The planned choices that can never run, each with why: one they require failed or was
    skipped."""
    out: dict[str, str] = {}
    changed = True
    while changed:
        changed = False
        for name in state.planned:
            if name in out or name in state.ran:
                continue
            for dep in route.requires.get(name, ()):
                if dep in state.planned and (dep in state.failed or dep in out):
                    why = "failed" if dep in state.failed else "was skipped"
                    out[name] = f"'{name}' requires '{dep}', which {why}"
                    changed = True
                    break
    return out


def _refusal(route: StepDoc, state: RouteState, name: str, gone: Mapping[str, str]) -> str | None:
    """Why `name` may not run now, or None if it may."""
    if name not in route.choices:
        return f"'{name}' is not a step this route may pick"
    if name not in state.planned:
        return f"'{name}' is not in the plan"
    if name in gone:
        return gone[name]
    if (name in state.ran or name in state.failed) and name not in route.repeatable:
        return f"'{name}' has run already"
    waiting = [d for d in route.requires.get(name, ())
               if d in state.planned and d not in state.ran]
    if waiting:
        return f"'{name}' must wait for {', '.join(repr(d) for d in waiting)}"
    return None


def allowed(route: StepDoc, state: RouteState) -> list[str]:
    """The planned choices that may run now, in the plan's order."""
    gone = skipped(route, state)
    return [n for n in state.planned if _refusal(route, state, n, gone) is None]


def decide(route: StepDoc, state: RouteState, answer: str | None) -> Decision:
    """The next step given the router's `answer` (None: the router was not asked)."""
    assert route.finish is not None  # the document check says so
    may = allowed(route, state)
    if answer is None:
        why = "every planned step has run or was skipped" if not may else None
        return Decision(may[0] if may else route.finish, DecidedBy.ENGINE, reason=why)
    asked = named_step(answer)
    reason: str | None
    if asked is None:
        reason = "the router's answer names no step"
    elif asked == route.finish:
        return Decision(asked, DecidedBy.ROUTER, asked=asked)
    else:
        reason = _refusal(route, state, asked, skipped(route, state))
        if reason is None:
            return Decision(asked, DecidedBy.ROUTER, asked=asked)
    return Decision(may[0] if may else route.finish, DecidedBy.FALLBACK, asked=asked,
                    reason=reason)


def named_step(answer: str) -> str | None:
    """The step a router's answer names: `{"next": "calendar", …}` (fenced or among prose),
    or an answer that is just the name."""
    found = answers.find_json(answer)
    if found.found and isinstance(found.value, Mapping):
        value = found.value.get("next")
        return value.strip().lower() if isinstance(value, str) and value.strip() else None
    word = answer.strip().strip("`'\".").strip().lower()
    return word if word and word.replace("_", "").isalnum() else None


def describe(outputs: Sequence[tuple[str, Any]]) -> str:
    """The outputs of the steps that ran, for a prompt: one block per step."""
    return "\n\n".join(f"[{name}]\n" + (value if isinstance(value, str)
                                         else json.dumps(value, indent=1))
                       for name, value in outputs)
