"""Workflow documents: a way of organising agents written as data (YAML), checked once.

A document names its `parameters` (typed, with defaults and bounds), its `roles` (a prompt
template, an optional output contract as JSON Schema, preferred tools, MCP servers) and its
`steps` with their edges (`after`) and `loops` (back to an earlier step while a condition holds,
at most `max` times). Each model checks its own fields; what spans the document is checked by
`consistency.problems`, and `loading.load_document` parses the YAML and reports the first
problem with the file, the line and the field, never a traceback.
`WorkflowDocument.model_json_schema()` is the published schema (`GET /api/v1/workflows/schema`).
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Annotated, Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, model_validator

from shoal.engine.options import McpServerSpec
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


