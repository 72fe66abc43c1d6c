"""Typed plans, in a workflow document: the task types an `expand` step's planner may plan, the
role that runs each type, its quality gate, what a failure of it costs, how the plan is
scheduled (`waves` or `eager`) and the plan used when the planner gives none (`default_plan`).

```yaml
- id: plan
  kind: expand
  role: planner
  schedule: "{schedule}"          # waves: wave N+1 starts once every gate of wave N decided
  types:
    write_report:
      role: writer
      writes_result: true         # its answer is the report file
      reserved: true              # with a budget, what it will cost is kept back for it
    retrieval_rag:
      role: rag                   # who runs a task of this type
      description: search the documents for passages that answer a question
      if_failed: gap              # its retries spent: a gap in the report, not a failed task
      if_budget_short: gap        # not started when the budget cannot cover the rest: a gap
      gate: {judge: judge, min_score: "{rag_threshold}", on_fail: retry, retries: 1,
             hint: "Search again with an expanded query: synonyms, related terms."}
  default_plan:
    - {name: Passages, type: retrieval_rag, description: "…"}
```

With `questions` the planner first names the question's sub-questions (the parts a complete
answer must cover), and every task of a type that `serves` them says which it serves; at the end
the engine counts each sub-question answered (a task serving it found something) or a gap
(saying what was searched for it, and where), and `task_complete` says "n of m answered":

```yaml
  questions: {min: 1, max: 6}       # the plan's answer: {"questions": [{"id", "question"}], …}
  types:
    retrieval_rag: {role: rag, serves: true}    # each of its tasks: "serves": ["q1", …]
```

With `approve_plan` (true, or a boolean parameter) the plan waits at a checkpoint before anything
of it runs: a person approves it, answers with an edited plan (the same JSON, checked the same
way), or rejects it. A gate's judge is a role whose answer's contract holds the score (`score`,
a field path); below
`min_score` the gate's `on_fail` acts: `retry` runs the task again with the judge's answer and
the `hint` (at most `retries` times, then `then`: `gap`, `keep` or `fail`), `warn` keeps the
answer with a notice, `fail` fails the task. With a budget, the runs of `reserved` types are
budgeted first: what they will cost is kept back, estimated from what they will read, and runs of
`if_budget_short: gap` types are skipped to keep it (`reserve`); if the budget runs out anyway,
the result is written from what is done (`partial_report`). The checks that need the whole
document (roles that exist, parameters of the right type) are `problems`, which
`consistency.problems` calls.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

NAME = r"^[a-z][a-z0-9_]{0,39}$"
PARAM = r"^\{[a-z][a-z0-9_]*\}$"
MAX_RETRIES = 5  # the most a gate's `retries` may be
MAX_QUESTIONS = 20  # the most sub-questions a plan may name
Name = Annotated[str, Field(pattern=NAME)]
Path = tuple[str | int, ...]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Schedule(StrEnum):
    """How the runs of a plan are started."""

    EAGER = "eager"  # each as soon as the tasks it depends on are done
    WAVES = "waves"  # by topological layers: a layer once every gate of the one before decided


class Phase(StrEnum):
    """Where a task with a typed plan is (seed 002's phases): `phase` events and the task's
    detail say it. A type names the phase its tasks belong to (`executing` or `synthesizing`)."""

    INITIALIZING = "initializing"  # created; its planner has not started
    PLANNING = "planning"  # the planner runs
    PLANNED = "planned"  # the plan is made (and may wait for a person to approve it)
    EXECUTING = "executing"  # tasks of `executing` types run
    SYNTHESIZING = "synthesizing"  # only tasks of `synthesizing` types are left
    COMPLETE = "complete"
    FAILED = "failed"  # failed, cancelled, or out of budget


class OnFail(StrEnum):
    """What a gate does with a score below its threshold."""

    RETRY = "retry"  # run the task again, told the judge's answer and the hint
    WARN = "warn"  # keep the answer, with a warning
    FAIL = "fail"  # fail the task


class Spent(StrEnum):
    """What a task becomes once its gate's retries are spent (or the retry failed)."""

    GAP = "gap"  # skipped: a gap that dependents and the report are told of
    KEEP = "keep"  # its last answer, with a warning
    FAIL = "fail"  # the task fails


class IfFailed(StrEnum):
    """What a task whose attempts all failed becomes (`if_failed`); or, not started yet, when
    the task's budget cannot cover the rest of its plan (`if_budget_short`)."""

    FAIL = "fail"  # the task fails (as any step's); runs as planned, for `if_budget_short`
    GAP = "gap"  # a gap; its dependents run with what exists


class TypeGate(_Strict):
    """A quality gate on every task of one type, decided by a judge role."""

    judge: Name = Field(description="The role that judges each answer: its output contract "
                                    "holds the score.")
    score: str = Field(default="score", pattern=r"^[a-z0-9_]+(\.[a-z0-9_]+)*$",
                       description="The field path of the score in the judge's answer.")
    min_score: float | Annotated[str, Field(pattern=PARAM)] = Field(
        description="The least score that passes, or a number `{parameter}`.")
    on_fail: OnFail = Field(default=OnFail.RETRY,
                            description="What a score below `min_score` does.")
    retries: int | Annotated[str, Field(pattern=PARAM)] = Field(
        default=1, description="retry: the most runs again (0 to 5), or an integer "
                               "`{parameter}`.")
    then: Spent = Field(default=Spent.GAP,
                        description="What the task becomes once its retries are spent.")
    hint: str = Field(default="", max_length=2_000,
                      description="What a retry is told to do differently.")


class CheckKind(StrEnum):
    """What Shoal's code checks in an answer, on a worker that has the task's sources."""

    CITATIONS = "citations"  # each cited sentence against its passage or its SQL's rows


class SubQuestions(_Strict):
    """The planner names the question's sub-questions, between `min` and `max` of them."""

    min: int = Field(default=1, ge=1, le=MAX_QUESTIONS,
                     description="The fewest sub-questions the plan must name.")
    max: int = Field(default=6, ge=1, le=MAX_QUESTIONS,
                     description="The most sub-questions the plan may name.")


class PlanType(_Strict):
    """A type of task the planner may plan."""

    role: Name = Field(description="The role that runs a task of this type.")
    serves: bool = Field(default=False, description="With the step's `questions`: each task "
                                                    "names the sub-questions it serves.")
    description: str = Field(default="", max_length=1_000,
                             description="What a task of this type does, told to the planner.")
    gate: TypeGate | None = Field(default=None,
                                  description="A quality gate on every task of this type.")
    if_failed: IfFailed = Field(default=IfFailed.FAIL,
                                description="What a task whose attempts all failed becomes.")
    writes_result: bool = Field(default=False, description="Its answer is the document's "
                                                           "result file (the report).")
    if_budget_short: IfFailed = Field(
        default=IfFailed.FAIL, description="`gap`: not started, and a gap, when the task's "
                                           "budget cannot cover the rest of its plan.")
    reserved: bool = Field(default=False, description="With a budget, what its runs will cost "
                                                      "is kept back for them first.")
    phase: Phase = Field(default=Phase.EXECUTING, description="The task's phase while tasks of "
                                                              "this type are left (`executing` "
                                                              "or `synthesizing`).")
    check: CheckKind | None = Field(default=None, description="What Shoal's code checks in its "
                                                              "answer (needs `writes_result`).")


class DefaultTask(_Strict):
    """A task of the plan used when the planner gives none that fits."""

    name: str = Field(min_length=1, max_length=200, description="The task's name.")
    type: Name = Field(description="Its type, one of the step's `types`.")
    description: str = Field(min_length=1, max_length=4_000,
                             description="What the task is to do.")
    dependencies: list[str] = Field(default_factory=list,
                                    description="The names of earlier tasks it waits for.")


ScheduleField = Schedule | Annotated[str, Field(pattern=PARAM)]
Switch = bool | Annotated[str, Field(pattern=PARAM)]  # on or off, or a boolean parameter


def problems(step: Any, i: int, roles: Mapping[str, Any],
             parameters: Mapping[str, Any]) -> list[tuple[Path, str]]:
    """What is wrong with the typed-plan fields of step `i` (a `StepDoc`) in a document with
    `roles` (name → `Role`) and `parameters` (name → `Parameter`)."""
    where: Path = ("steps", i)
    found: list[tuple[Path, str]] = []
    typed = bool(step.types)
    if not typed:
        for field in ("default_plan",):
            if getattr(step, field):
                found.append(((*where, field), "only a step with `types` takes a default plan"))
        if step.questions is not None:
            found.append(((*where, "questions"), "only a step with `types` names "
                                                 "sub-questions"))
        if step.schedule != Schedule.EAGER:
            found.append(((*where, "schedule"), "only a step with `types` is scheduled in "
                                                "waves"))
        if step.approve_plan is not False:
            found.append(((*where, "approve_plan"), "only a step with `types` has its plan "
                                                    "approved"))
        return found
    if step.each is not None:
        found.append(((*where, "each"), "give either `each` or `types`"))
    if isinstance(step.schedule, str) and step.schedule.startswith("{"):
        found += parameter_problem((*where, "schedule"), step.schedule, parameters,
                                    ("string",), choices=set(Schedule))
    if isinstance(step.approve_plan, str):
        found += parameter_problem((*where, "approve_plan"), step.approve_plan, parameters,
                                    ("boolean",))
    found += _question_problems(step, where)
    for name, kind in step.types.items():
        at: Path = (*where, "types", name)
        if kind.phase not in (Phase.EXECUTING, Phase.SYNTHESIZING):
            found.append(((*at, "phase"), "a type's tasks are executing or synthesizing"))
        if kind.role not in roles:
            found.append(((*at, "role"), f"no role '{kind.role}' in roles"))
        elif kind.writes_result and roles[kind.role].output is not None:
            found.append(((*at, "writes_result"), f"role '{kind.role}' answers JSON: the "
                                                  "result file is its text, so give it none"))
        if kind.gate is not None:
            found += _gate_problems((*at, "gate"), kind.gate, roles, parameters)
        if kind.check is not None and not kind.writes_result:
            found.append(((*at, "check"), "the check rewrites the result file: give the type "
                                          "`writes_result: true`"))
    found += _reserve_problems(step, where)
    names: list[str] = []
    for j, task in enumerate(step.default_plan):
        if task.type not in step.types:
            found.append(((*where, "default_plan", j, "type"), f"no type '{task.type}' in "
                                                               "types"))
        for dep in task.dependencies:
            if dep not in names:
                found.append(((*where, "default_plan", j, "dependencies"),
                              f"'{dep}' is not an earlier task of the default plan"))
        names.append(task.name)
    return found


def _question_problems(step: Any, where: Path) -> list[tuple[Path, str]]:
    serving = [name for name, kind in step.types.items() if kind.serves]
    if step.questions is None:
        return [((*where, "types", name, "serves"), "a type serves the step's `questions`: "
                                                   "give the step some") for name in serving]
    if step.questions.min > step.questions.max:
        return [((*where, "questions", "min"), "at most `max`")]
    if not serving:
        return [((*where, "questions"), "no type `serves` the sub-questions: mark the types "
                                        "whose tasks answer them")]
    return []


def _reserve_problems(step: Any, where: Path) -> list[tuple[Path, str]]:
    """A reserved type is never skipped for the budget, and keeps its reserve by skipping
    others: some type of the step must say `if_budget_short: gap`."""
    found: list[tuple[Path, str]] = []
    skippable = [n for n, k in step.types.items() if k.if_budget_short is IfFailed.GAP]
    for name, kind in step.types.items():
        if not kind.reserved:
            continue
        at: Path = (*where, "types", name, "reserved")
        if kind.if_budget_short is IfFailed.GAP:
            found.append((at, "a reserved type is not skipped for the budget: give it "
                              "`reserved` or `if_budget_short: gap`, not both"))
        elif not skippable:
            found.append((at, "nothing can be skipped to keep the reserve: give the types "
                              "that may be left out `if_budget_short: gap`"))
    return found


def _gate_problems(at: Path, gate: TypeGate, roles: Mapping[str, Any],
                   parameters: Mapping[str, Any]) -> list[tuple[Path, str]]:
    found: list[tuple[Path, str]] = []
    judge = roles.get(gate.judge)
    if judge is None:
        found.append(((*at, "judge"), f"no role '{gate.judge}' in roles"))
    elif judge.output is None:
        found.append(((*at, "judge"), f"role '{gate.judge}' judges: give it an output "
                                      f"contract holding '{gate.score}'"))
    if isinstance(gate.min_score, str):
        found += parameter_problem((*at, "min_score"), gate.min_score, parameters,
                                    ("number", "integer"))
    if isinstance(gate.retries, str):
        found += parameter_problem((*at, "retries"), gate.retries, parameters, ("integer",),
                                    most=MAX_RETRIES)
    elif not 0 <= gate.retries <= MAX_RETRIES:
        found.append(((*at, "retries"), f"a gate retries 0 to {MAX_RETRIES} times"))
    return found


def parameter_problem(at: Path, ref: str, parameters: Mapping[str, Any], kinds: tuple[str, ...],
                       *, most: int | None = None,
                       choices: set[str] | None = None) -> list[tuple[Path, str]]:
    name = ref.strip("{}")
    param = parameters.get(name)
    if param is None or param.type.value not in kinds:
        return [(at, f"no {' or '.join(kinds)} parameter '{name}'")]
    if most is not None and (param.maximum is None or param.maximum > most
                             or (param.minimum or 0) < 0):
        return [(at, f"parameter '{name}' bounds it: give it a maximum, within 0..{most}")]
    if choices is not None and not (param.choices and set(param.choices) <= choices):
        return [(at, f"parameter '{name}' chooses it: give it choices among "
                     f"{', '.join(sorted(choices))}")]
    return []
