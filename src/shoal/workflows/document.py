"""Workflow documents: a way of organising agents written as data (YAML), checked once.

A document names its `parameters` (typed, with defaults and bounds), its `roles` (a prompt
template, an optional output contract as JSON Schema, preferred tools, MCP servers) and its
`steps` with their edges (`after`) and `loops` (back to an earlier step while a condition holds,
at most `max` times). `load_document` parses the YAML and reports the first problem with the
file, the line and the field, never a traceback; `WorkflowDocument.model_json_schema()` is the
published schema (`GET /api/v1/workflows/schema`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Annotated, Any, Literal, cast

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from shoal.engine import dag
from shoal.engine.options import McpServerSpec
from shoal.errors import InvalidGraph, InvalidInput
from shoal.workflows import facts, plan_types
from shoal.workflows import stages as stage_machine
from shoal.workflows.event_names import EventName
from shoal.workflows.facts import LearnField, RequiresFacts
from shoal.workflows.plan_types import (
    DefaultTask,
    PlanType,
    Schedule,
    ScheduleField,
    SubQuestions,
    Switch,
)
from shoal.workflows.stages import Stages

NAME = r"^[a-z][a-z0-9_]{0,39}$"
WORKFLOW_NAME = r"^[a-z][a-z0-9_-]{0,39}$"
MAX_LOOPS = 20  # the most a loop's cap may be
MAX_HOPS = 100  # the most decisions a route's cap may allow
MAX_ASKS = 20  # the most questions (or delegations) one round of a step may make
# What every prompt may name besides parameters and entries, and what it becomes (`board`).
BUILTIN_FIELDS: Mapping[str, str] = {
    "query": "the task's description: what the user asked",
    "item": "a map step's item, or the planned subtask a run of an expand step's plan does",
    "feedback": "the entry a loop carries back to the step it runs again (empty at first)",
    "context": "every entry written by a step this one comes after, each under its name",
    "conversation": "what a step that `asks` heard so far this round, questions and answers",
    "execution_order": "a route's steps picked so far, in order",
    "agent_outputs": "the latest answer of each step a route picked",
    "allowed": "the steps a route may pick now",
}
ENTRY_PATH = r"^[a-z][a-z0-9_]*(\.[a-z0-9_]+)*$"
Cap = int | Annotated[str, Field(pattern=r"^\{[a-z][a-z0-9_]*\}$")]
_PLACEHOLDER = re.compile(r"\{([a-zA-Z_][a-zA-Z0-9_]*)(?:\.[a-zA-Z0-9_.]+)?\}")

Name = Annotated[str, Field(pattern=NAME)]
Path = tuple[str | int, ...]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ParameterType(StrEnum):
    INTEGER = "integer"
    NUMBER = "number"
    STRING = "string"
    BOOLEAN = "boolean"


class Parameter(_Strict):
    """A setting a user may give when they submit (`parameters` of `POST /api/v1/tasks`)."""

    type: ParameterType = Field(description="The type a given value must have.")
    default: int | float | str | bool = Field(
        description="The value when the user gives none; it must fit the bounds and choices.")
    minimum: float | None = Field(default=None, description="The least a number may be.")
    maximum: float | None = Field(
        default=None, description="The most a number may be; a parameter used as a cap (a "
                                  "loop's `max`, `asks.max`, `max_hops`) needs one.")
    choices: list[str] | None = Field(default=None,
                                      description="The only values a string may take.")
    description: str = Field(default="", description="What it sets, shown to the user.")

    @model_validator(mode="after")
    def _default_fits(self) -> Parameter:
        if self.minimum is not None and self.maximum is not None and self.minimum > self.maximum:
            raise ValueError("minimum is above maximum")
        self.check(self.default)
        return self

    def check(self, value: Any) -> int | float | str | bool:
        """`value` if it is of this parameter's type and within its bounds; else ValueError."""
        kinds: dict[ParameterType, tuple[type, ...]] = {
            ParameterType.INTEGER: (int,), ParameterType.NUMBER: (int, float),
            ParameterType.STRING: (str,), ParameterType.BOOLEAN: (bool,)}
        if not isinstance(value, kinds[self.type]) or (
                isinstance(value, bool) and self.type is not ParameterType.BOOLEAN):
            raise ValueError(f"must be of type {self.type.value}")
        if isinstance(value, int | float) and not isinstance(value, bool):
            if self.minimum is not None and value < self.minimum:
                raise ValueError(f"must be at least {self.minimum:g}")
            if self.maximum is not None and value > self.maximum:
                raise ValueError(f"must be at most {self.maximum:g}")
        if self.choices is not None and value not in self.choices:
            raise ValueError(f"must be one of {', '.join(self.choices)}")
        return cast(int | float | str | bool, value)


class McpServer(_Strict):
    """An MCP server a role's agent may use: a command to start, or a URL to reach."""

    name: Name = Field(description="The server's name, as the agent sees its tools.")
    command: str | None = Field(default=None, description="The program the worker starts "
                                                          "(stdio); give it or `url`.")
    args: list[str] = Field(default_factory=list, description="The command's arguments.")
    url: str | None = Field(default=None, description="The server's address (HTTP); give it or "
                                                      "`command`.")
    env: dict[str, str] = Field(default_factory=dict,
                                description="Environment variables the command starts with.")

    @model_validator(mode="after")
    def _one_way_in(self) -> McpServer:
        if (self.command is None) == (self.url is None):
            raise ValueError("give either a command or a url")
        return self


class BuiltinRole(StrEnum):
    """A role whose prompt is Shoal's own (seed 004's), written when its step is dispatched."""

    PLANNER = "planner"  # plans the request: its requirements, the tools the worker has
    CODER = "coder"  # does one subtask in its folder: a failed attempt, corrections, guidance


class Role(_Strict):
    """Who does a step: the prompt template (or a built-in role's), what its answer must be,
    where it may run."""

    prompt: str = Field(
        default="", max_length=20_000,
        description="The prompt template: `{name}` is a parameter, an entry written by a step "
                    "(`{draft}`, `{feedback.verdict}`) or a built-in (`query`, `item`, "
                    "`feedback`, `context`, …). Give it or `builtin`.")
    builtin: BuiltinRole | None = Field(default=None,
                                        description="Use Shoal's own prompt for this role.")
    output: dict[str, Any] | None = Field(
        default=None, description="A JSON Schema the answer must satisfy: the agent answers in "
                                  "JSON, a wrong answer is sent back once with the problem, "
                                  "then fails the step. None: the answer is text.")
    tools: list[str] = Field(default_factory=list, description="Preferred tools (`claude`, "
                             "`openai_compat`, …), in order; the first is recommended.")
    mcp_servers: list[McpServer] = Field(default_factory=list,
                                         description="MCP servers its agent may use.")

    @model_validator(mode="after")
    def _one_prompt(self) -> Role:
        if bool(self.prompt.strip()) == (self.builtin is not None):
            raise ValueError("give either a prompt or a builtin role")
        if self.builtin is not None and self.output is not None:
            raise ValueError("a builtin role answers in its own format: give it no output")
        return self

    def mcp_specs(self) -> tuple[McpServerSpec, ...]:
        """Its MCP servers as a step's options carry them to the worker."""
        return tuple(McpServerSpec(name=m.name, command=m.command, args=tuple(m.args),
                                   url=m.url, env=dict(m.env)) for m in self.mcp_servers)


class DocStepKind(StrEnum):
    """The step kinds a document may use."""

    AGENT = "agent"  # one subtask for a role
    EXPAND = "expand"  # a role's output becomes subtasks with dependencies
    MAP = "map"  # one subtask per item of an earlier output, then a join
    ROUTE = "route"  # a router role picks the next step among `choices`
    GATE = "gate"  # compares scores to thresholds and acts
    HUMAN = "human"  # waits for a person


_NEEDS_ROLE = frozenset({DocStepKind.AGENT, DocStepKind.EXPAND, DocStepKind.MAP,
                         DocStepKind.ROUTE})


class Asks(_Strict):
    """An agent step's role may ask before it answers, at most `max` times a round: a person
    (no `role`: the task waits, `awaiting_input`, for an answer) or another role (`role`: a
    delegation, run as its own subtask). Each answer goes back to the step's role with the
    round's whole conversation (`{conversation}`). With `learn`, the engine keeps what is known
    and asks only for what is missing (`facts`)."""

    role: Name | None = Field(
        default=None, description="Another role to delegate to, each question run as its own "
                                  "subtask; none: the person who submitted the task answers.")
    max: Cap = Field(default=5, description="The most questions a round may ask (0 to 20), or "
                                            "`{parameter}` (an integer one with a maximum).")
    learn: LearnField


class StepDoc(_Strict):
    """One step of a document."""

    id: Name = Field(description="The step's name, unique in the document.")
    kind: DocStepKind = Field(description="What the step does.")
    role: Name | None = Field(default=None, description="The role that runs it (of `roles`); "
                                                        "agent, expand, map and route need one.")
    after: list[Name] = Field(default_factory=list,
                              description="The steps it comes after: it starts once each has "
                                          "a completed run newer than its own last one.")
    writes: Name | None = Field(default=None, description="The blackboard entry its output "
                                                          "becomes (default: its id).")
    over: str | None = Field(
        default=None, pattern=ENTRY_PATH,
        description="map: the `entry.field` list it runs once per item of (`{item}`); gate: the "
                    "`entry.field` holding the score. Written by a step it comes after.")
    choices: list[Name] = Field(default_factory=list, description="route: the steps it may "
                                "pick (agent or map steps, with no `after` of their own).")
    finish: Name | None = Field(default=None,
                                description="route: the step run once routing is over.")
    plan: str | None = Field(
        default=None, pattern=ENTRY_PATH,
        description="route: the `entry.field` listing the planned choices (names, or a mapping "
                    "whose true keys name them); none: every choice is planned.")
    requires: dict[Name, list[Name]] = Field(
        default_factory=dict, description="route: a choice runs only after these planned "
                                          "choices ran, and never if one of them failed.")
    repeatable: list[Name] = Field(default_factory=list,
                                   description="route: the choices that may run more than once.")
    max_hops: Cap = Field(default=10, description="route: the most decisions (1 to 100, or "
                                                  "`{parameter}`) before it goes to `finish`.")
    each: Name | None = Field(default=None, description="expand: the role that runs each "
                                                        "planned subtask (or give `types`).")
    types: dict[Name, PlanType] = Field(default_factory=dict,
                                        description="expand: the task types its planner may "
                                                    "plan, by name (a typed plan).")
    schedule: ScheduleField = Field(
        default=Schedule.EAGER, description="expand with types: how the plan's tasks start, "
                                            "or a string `{parameter}` choosing it.")
    default_plan: list[DefaultTask] = Field(
        default_factory=list, max_length=50,
        description="expand with types: the plan used when the planner gives none that fits.")
    questions: SubQuestions | None = Field(
        default=None, description="expand with types: the planner first names the question's "
                                  "sub-questions; each is counted answered or a gap at the end.")
    approve_plan: Switch = Field(
        default=False, description="expand with types: a person approves, edits or rejects "
                                   "the plan before it runs (true, or a boolean `{parameter}`).")
    stage: Name | None = Field(default=None, description="The declared stage it belongs to "
                                                         "(needed when the document has "
                                                         "`stages`).")
    asks: Asks | None = Field(default=None, description="agent: its role may ask a person or "
                                                        "another role before it answers.")
    requires_facts: RequiresFacts | None = Field(
        default=None, description="agent: its answer must state each fact an earlier step that "
                                  "asks learned (sent back once with those it leaves out).")
    optional: bool = Field(default=False, description="A user may switch it off when they "
                                                      "submit (`skip`).")
    quality: bool = Field(default=False, description="Its runs go through Shoal's quality loop "
                                                     "(evaluate, peer review, fix).")
    allows_insert: bool = Field(default=False, description="A user may insert a role of their "
                                                           "own right after it.")
    question: str | None = Field(default=None, description="human: what the person is asked "
                                                           "(a template, like a prompt).")
    min_score: float | None = Field(default=None, ge=0, le=10,
                                    description="gate: the least score (0 to 10) that passes.")
    on_fail: Literal["checkpoint", "continue", "fail"] = Field(
        default="checkpoint", description="gate, below `min_score`: ask a person "
                                          "(`checkpoint`), go on with a notice (`continue`) or "
                                          "fail the task (`fail`).")

    @property
    def entry(self) -> str:
        """The name of the blackboard entry this step writes."""
        return self.writes or self.id


class Condition(_Strict):
    """`entry.field == equals` on the blackboard's latest revision of `entry`."""

    entry: Name = Field(description="The blackboard entry read.")
    field: str | None = Field(default=None, pattern=r"^[a-z0-9_]+(\.[a-z0-9_]+)*$",
                              description="A field path in the entry's JSON; none: the whole "
                                          "entry.")
    equals: str | int | float | bool = Field(description="The value that makes it hold.")


class Loop(_Strict):
    """Back from `from` to the earlier step `to` while `when` holds, at most `max` times."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    source: Name = Field(alias="from", description="The step whose completed run is checked.")
    to: Name = Field(description="The step that runs again: `from` itself or a step before it.")
    when: Condition = Field(description="Go back while this holds.")
    max: Cap = Field(description="The most times it goes back (0 to 20), or `{parameter}` (an "
                                 "integer one with a maximum).")
    carry: Name | None = Field(default=None, description="The entry handed back as "
                                                         "`{feedback}` (default: `when.entry`).")
    via: Name | None = Field(default=None, description="The declared stage the task passes "
                                                       "through going back.")
    ask_at_cap: Switch = Field(default=False,
                               description="At the cap, a person decides whether the task goes "
                                           "on (true, or a boolean `{parameter}`).")


class WorkflowDocument(_Strict):
    """A workflow as data."""

    name: Annotated[str, Field(pattern=WORKFLOW_NAME)] = Field(
        description="The workflow's name, as a task names it (`--workflow`).")
    version: int = Field(ge=1, description="Its version; a new one is stored beside the old, "
                                           "and running tasks keep theirs.")
    description: str = Field(min_length=1, max_length=2_000,
                             description="What it does, for the people who choose it.")
    parameters: dict[Name, Parameter] = Field(default_factory=dict,
                                              description="What a user may set, by name.")
    roles: dict[Name, Role] = Field(description="Who does the steps, by name.")
    steps: list[StepDoc] = Field(min_length=1, max_length=100,
                                 description="What runs, in the order they are listed.")
    loops: list[Loop] = Field(default_factory=list,
                              description="Back to an earlier step while a condition holds.")
    result: Name | None = Field(default=None, description="The entry holding the final answer "
                                                          "(default: the last step's).")
    result_file: str | None = Field(
        default=None, pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}\.md$",
        description="The file the result becomes (default: `<result>.md`).")
    events: dict[Name, EventName] = Field(
        default_factory=dict, description="Its own names for Shoal's events, for clients that "
                                          "ask for them (`?names=workflow`).")
    needs_sources: bool = Field(default=False, description="A task of it reads the user's "
                                                           "files: one without is refused.")
    stages: Stages | None = Field(default=None, description="Its declared stages and the moves "
                                                            "allowed between them.")

    @property
    def result_entry(self) -> str:
        return self.result or self.steps[-1].entry

    @property
    def result_filename(self) -> str:
        return self.result_file or f"{self.result_entry}.md"


class DocumentError(InvalidInput):
    """A document that cannot be used; `details` name the file, line and field."""


def load_document(text: str, *, source: str = "<document>") -> WorkflowDocument:
    """The document in `text` (YAML), checked; `DocumentError` names what is wrong, where."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or "not valid YAML"
        raise _error(source, line, None, f"not valid YAML: {problem}") from None
    if not isinstance(data, dict):
        raise _error(source, 1, None, "a workflow document is a mapping (name, version, …)")
    try:
        doc = WorkflowDocument.model_validate(data)
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        path = tuple(p for p in first["loc"] if isinstance(p, str | int))
        raise _error(source, _line(node, path), path, _message(first)) from None
    for path, message in problems(doc):
        raise _error(source, _line(node, path), path, message)
    return doc


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


def _line(node: yaml.Node | None, path: Path) -> int | None:
    """The line (1-based) of the deepest node along `path` in the composed YAML."""
    found = node
    for part in path:
        if isinstance(found, yaml.MappingNode):
            found = next((v for k, v in found.value if k.value == part), None) or found
            if found is None:
                break
        elif isinstance(found, yaml.SequenceNode) and isinstance(part, int):
            if part >= len(found.value):
                break
            found = found.value[part]
        else:
            break
    return found.start_mark.line + 1 if found is not None else None


def _message(error: Mapping[str, Any]) -> str:
    message = str(error["msg"]).removeprefix("Value error, ")
    if error["type"] == "missing":
        return "is required"
    if error["type"] == "extra_forbidden":
        return "is not a field here"
    return message


def _error(source: str, line: int | None, path: Path | None, message: str) -> DocumentError:
    field = ".".join(str(p) for p in path) if path else None
    where = f"{source}:{line}" if line is not None else source
    text = f"{where}: {field}: {message}" if field else f"{where}: {message}"
    return DocumentError(text, details={"file": source, "line": line, "field": field,
                                        "problem": message})
