"""What makes a workflow document unusable although each part is well-formed: references to
nowhere, cycles, loops that do not go back, prompts naming what nothing provides, each with the
path of the field at fault (`loading` turns it into the file's line)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from shoal.engine import dag
from shoal.errors import InvalidGraph
from shoal.workflows import facts, plan_types
from shoal.workflows import stages as stage_machine
from shoal.workflows.document import (
    BUILTIN_FIELDS,
    MAX_ASKS,
    MAX_HOPS,
    MAX_LOOPS,
    DocStepKind,
    Loop,
    ParameterType,
    Path,
    StepDoc,
    WorkflowDocument,
)

_PLACEHOLDER = re.compile(r"\{([a-zA-Z_][a-zA-Z0-9_]*)(?:\.[a-zA-Z0-9_.]+)?\}")
_NEEDS_ROLE = frozenset({DocStepKind.AGENT, DocStepKind.EXPAND, DocStepKind.MAP,
                         DocStepKind.ROUTE})


def problems(doc: WorkflowDocument) -> list[tuple[Path, str]]:
    """What makes `doc` unusable although each part is well-formed: references to nowhere,
    cycles, loops that do not go back, prompts naming what nothing provides."""
    found: list[tuple[Path, str]] = []
    ids = [s.id for s in doc.steps]
    index = {sid: i for i, sid in enumerate(ids)}
    for i, step in enumerate(doc.steps):
        if ids.index(step.id) != i:
            found.append((("steps", i, "id"), f"step id '{step.id}' is used twice"))
        if step.kind in _NEEDS_ROLE and step.role is None:
            found.append((("steps", i, "role"), f"a {step.kind.value} step needs a role"))
        if step.role is not None and step.role not in doc.roles:
            found.append((("steps", i, "role"), f"no role '{step.role}' in roles"))
        for j, dep in enumerate(step.after):
            if dep not in index:
                found.append((("steps", i, "after", j), f"no step '{dep}' to come after"))
        for j, choice in enumerate(step.choices):
            if choice not in index:
                found.append((("steps", i, "choices", j), f"no step '{choice}' to route to"))
        if step.kind is DocStepKind.ROUTE and not step.choices:
            found.append((("steps", i, "choices"), "a route step needs choices"))
        if step.kind is DocStepKind.MAP and step.over is None:
            found.append((("steps", i, "over"), "a map step needs `over` (entry.field)"))
        if step.kind is DocStepKind.GATE and step.min_score is None:
            found.append((("steps", i, "min_score"), "a gate step needs min_score"))
        if step.kind is DocStepKind.EXPAND and not step.types and step.each not in doc.roles:
            found.append((("steps", i, "each"), "an expand step needs `each`: the role that "
                                                "runs every planned subtask (or `types`)"))
        for field in ("each", "types"):
            if getattr(step, field) and step.kind is not DocStepKind.EXPAND:
                found.append((("steps", i, field), f"only an expand step takes `{field}`"))
        found += plan_types.problems(step, i, doc.roles, doc.parameters)
        if step.kind is DocStepKind.GATE and step.over is None:
            found.append((("steps", i, "over"), "a gate step needs `over`: the entry.field "
                                                "holding the score"))
        if step.kind is DocStepKind.HUMAN and not step.question:
            found.append((("steps", i, "question"), "a human step needs a question"))
        if step.asks is not None:
            found += _asks_problems(doc, i, step)
    if found:
        return found
    graph = {s.id: tuple(s.after) for s in doc.steps}
    try:
        dag.validate_dag(graph, max_nodes=100)
    except InvalidGraph as exc:
        cycle = exc.details.get("cycle") or []
        return [(("steps", index[cycle[0]] if cycle else 0, "after"),
                 "the steps' `after` edges form a cycle: " + " → ".join(map(str, cycle)))]
    before = {sid: ancestors(graph, sid) for sid in ids}
    writers = {s.entry: s.id for s in doc.steps}
    for i, step in enumerate(doc.steps):
        for field in ("over", "plan"):
            path = getattr(step, field)
            if path is not None and writers.get(path.split(".")[0]) not in before[step.id]:
                found.append((("steps", i, field), f"'{path.split('.')[0]}' is not written by "
                                                   "a step this one comes after"))
    found += _route_problems(doc, index)
    for i, step in enumerate(doc.steps):
        found += facts.problems(step, i, doc.roles, {s.id: s for s in doc.steps}, before[step.id])
    if found:
        return found
    for i, loop in enumerate(doc.loops):
        found += _loop_problems(doc, i, loop, index, before)
    if found:
        return found
    found += stage_machine.problems(doc.stages, doc.steps, doc.loops)
    if doc.result is not None and doc.result not in writers:
        found.append((("result",), f"no step writes '{doc.result}'"))
    known = set(doc.parameters) | set(writers) | set(BUILTIN_FIELDS)
    texts: list[tuple[Path, str]] = [(("roles", name, "prompt"), role.prompt)
                                     for name, role in doc.roles.items()]
    texts += [(("steps", i, "question"), s.question) for i, s in enumerate(doc.steps)
              if s.question]
    for path, text in texts:
        for field in _PLACEHOLDER.findall(text):
            if field not in known:
                found.append((path, f"{path[-1]} names {{{field}}}, which no parameter, step "
                                    f"or built-in ({', '.join(sorted(BUILTIN_FIELDS))}) "
                                    "provides"))
    return found


def _asks_problems(doc: WorkflowDocument, i: int, step: StepDoc) -> list[tuple[Path, str]]:
    assert step.asks is not None
    where: Path = ("steps", i, "asks")
    if step.kind is not DocStepKind.AGENT or step.quality:
        return [(where, "only an agent step without `quality` may ask")]
    role = doc.roles.get(step.role or "")
    if role is not None and role.builtin is not None:
        return [(where, f"role '{step.role}' is built in: it cannot ask")]
    whom = step.asks.role
    if whom is not None and (whom not in doc.roles or whom == step.role
                             or doc.roles[whom].builtin is not None):
        return [((*where, "role"), f"'{whom}' is not another role of roles with a prompt")]
    if problem := _cap_problem(doc, step.asks.max, 0, MAX_ASKS, "the questions' cap"):
        return [((*where, "max"), problem)]
    return []


def _loop_problems(doc: WorkflowDocument, i: int, loop: Loop, index: Mapping[str, int],
                   ancestors: Mapping[str, set[str]]) -> list[tuple[Path, str]]:
    where: Path = ("loops", i)
    if loop.source not in index:
        return [((*where, "from"), f"no step '{loop.source}' to loop from")]
    if loop.to not in index:
        return [((*where, "to"), f"no step '{loop.to}' to loop back to")]
    if loop.to != loop.source and loop.to not in ancestors[loop.source]:
        return [((*where, "to"), f"a loop goes back: '{loop.to}' does not come before "
                                 f"'{loop.source}'")]
    if problem := _cap_problem(doc, loop.max, 0, MAX_LOOPS, "a loop's cap"):
        return [((*where, "max"), problem)]
    if isinstance(loop.ask_at_cap, str) and (refused := plan_types.parameter_problem(
            (*where, "ask_at_cap"), loop.ask_at_cap, doc.parameters, ("boolean",))):
        return refused
    entries = {s.entry for s in doc.steps if s.id == loop.source or s.id in
               ancestors[loop.source]}
    if loop.when.entry not in entries:
        return [((*where, "when", "entry"), f"'{loop.when.entry}' is not written by "
                                            f"'{loop.source}' or a step before it")]
    return []


def _cap_problem(doc: WorkflowDocument, cap: int | str, least: int, most: int,
                 what: str) -> str | None:
    """Why `cap` (a number, or `{parameter}`) cannot bound something to `least`..`most`."""
    if isinstance(cap, int):
        return None if least <= cap <= most else f"{what} is {least} to {most}"
    name = cap.strip("{}")
    param = doc.parameters.get(name)
    if param is None or param.type is not ParameterType.INTEGER:
        return f"no integer parameter '{name}' for {what}"
    if param.maximum is None or param.maximum > most or (param.minimum or 0) < least:
        return f"parameter '{name}' is {what}: give it a maximum, within {least}..{most}"
    return None


def _route_problems(doc: WorkflowDocument, index: Mapping[str, int]) -> list[tuple[Path, str]]:
    """A route owns the steps it picks: they run only when picked (no `after`), belong to one
    route, take no part in loops; its rules name only its choices and form no cycle."""
    found: list[tuple[Path, str]] = []
    owner: dict[str, str] = {}
    for i, step in enumerate(doc.steps):
        if step.kind is not DocStepKind.ROUTE:
            continue
        if step.finish is None:
            found.append((("steps", i, "finish"), "a route step needs finish: the step run "
                                                  "once routing is over"))
            continue
        if step.role in doc.roles and doc.roles[step.role].output is not None:
            found.append((("steps", i, "role"), f"role '{step.role}' routes: it answers "
                                                '{"next": step}, so give it no output'))
        if step.finish not in index:
            found.append((("steps", i, "finish"), f"no step '{step.finish}' to finish with"))
        if step.finish in step.choices or step.id in (*step.choices, step.finish):
            found.append((("steps", i, "choices"), "a route picks other steps than itself "
                                                   "and its finish"))
        for name in (*step.choices, step.finish):
            picked = doc.steps[index[name]] if name in index else None
            if picked is not None and picked.kind not in (DocStepKind.AGENT, DocStepKind.MAP):
                found.append((("steps", i, "choices"), f"'{name}' is a {picked.kind.value} "
                                                       "step; a route picks agent or map steps"))
            if name in owner:
                found.append((("steps", i, "choices"), f"'{name}' is picked by route "
                                                       f"'{owner[name]}' already"))
            owner[name] = step.id
        for field, names in (("repeatable", step.repeatable),
                             ("requires", [*step.requires,
                                           *(n for v in step.requires.values() for n in v)])):
            for name in names:
                if name not in step.choices:
                    found.append((("steps", i, field), f"'{name}' is not one of the choices"))
        try:
            dag.validate_dag({c: tuple(step.requires.get(c, ())) for c in step.choices},
                             max_nodes=100)
        except InvalidGraph:
            found.append((("steps", i, "requires"), "the requirements form a cycle"))
        if problem := _cap_problem(doc, step.max_hops, 1, MAX_HOPS, "a route's max_hops"):
            found.append((("steps", i, "max_hops"), problem))
    for i, step in enumerate(doc.steps):
        if step.id in owner and step.after:
            found.append((("steps", i, "after"), f"'{step.id}' runs when route "
                                                 f"'{owner[step.id]}' picks it: remove after"))
        for j, dep in enumerate(step.after):
            route = doc.steps[index[owner[dep]]] if dep in owner else None
            if route is not None and dep != route.finish:
                found.append((("steps", i, "after", j), f"'{dep}' runs only if picked: come "
                                                        f"after '{route.finish}' instead"))
    routes = {s.id for s in doc.steps if s.kind is DocStepKind.ROUTE}
    people = {s.id for s in doc.steps if s.kind in (DocStepKind.HUMAN, DocStepKind.GATE)}
    for i, loop in enumerate(doc.loops):
        for field, name in (("from", loop.source), ("to", loop.to)):
            if name in owner or name in routes:
                found.append((("loops", i, field), f"'{name}' is routed: the route decides "
                                                   "what runs again (repeatable)"))
        if loop.source in people:
            found.append((("loops", i, "from"), f"'{loop.source}' is decided by a person or a "
                                                "gate; loop from the step it judges"))
    return found


def ancestors(graph: Mapping[str, Sequence[str]], sid: str) -> set[str]:
    seen: set[str] = set()
    stack = list(graph[sid])
    while stack:
        dep = stack.pop()
        if dep not in seen:
            seen.add(dep)
            stack.extend(graph[dep])
    return seen
