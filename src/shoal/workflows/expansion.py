"""An `expand` step: its role plans subtasks with dependencies, and the step's `each` role runs
every one of them (seed 004's planner, for any document) — or, with `types`, each subtask names
its type and that type's role runs it (`plan_types`).

The plan is read as the `dag` workflow reads its planner (`engine.fallback_plans.decompose`: the
JSON, else a template, else a split of the request, with a notice saying why). A typed plan is
checked against the JSON Schema its types make (`plan_schema`; a wrong answer is repaired once by
the interpreter), and falls back to the document's `default_plan`. Each planned subtask is a run
`step#n.i` of the same round as the plan, after the plan and the subtasks it depends on; the
step's entry is their answers in plan order once all are done.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Container, Mapping
from dataclasses import replace
from typing import Any

from shoal.engine import dag, fallback_plans, graph, planning
from shoal.engine.answers import find_json
from shoal.engine.model import StepKind, SubtaskRecord, evolve
from shoal.engine.options import McpServerSpec, StepOptions
from shoal.engine.step import Step
from shoal.errors import InvalidInput
from shoal.events import EventType
from shoal.states import SubtaskStatus
from shoal.workflows.blackboard import contract_problem
from shoal.workflows.document import DocStepKind, Role, StepDoc, WorkflowDocument

MAX_PLANNED = 50  # subtasks one expand step may plan
PLAN_FORMAT = (
    "\n\nAnswer with only a JSON object listing at most {most} subtasks, each depending only on "
    'earlier ones: {{"subtasks": [{{"name": "…", "description": "…", "dependencies": '
    '["name of an earlier subtask"]}}]}}')
TYPED_FORMAT = (
    "\n\nAnswer with only a JSON object listing at most {most} tasks, each of one of these "
    "types, depending only on earlier ones:\n{types}\n"
    '{{"subtasks": [{{"name": "…", "type": "…", "description": "…", "dependencies": '
    '["name of an earlier task"]}}]}}')
QUESTIONS_FORMAT = (
    "\n\nAnswer with only a JSON object. First name the question's sub-questions: the "
    "{least} to {most_q} parts a complete answer must cover, each answerable on its own. Then "
    "list at most {most} tasks, each of one of these types, depending only on earlier ones; a "
    "task of type {serving} names the sub-questions it serves (their ids):\n{types}\n"
    '{{"questions": [{{"id": "q1", "question": "…"}}], "subtasks": [{{"name": "…", '
    '"type": "…", "description": "…", "dependencies": ["name of an earlier task"], '
    '"serves": ["q1"]}}]}}')
QUESTION_ID = r"^q[0-9]{1,2}$"
Prompt = Callable[[Role, str], str]  # a role's prompt for one planned subtask (`{item}`)
Questions = tuple[tuple[str, str], ...]  # a plan's sub-questions: (id, question) each
Serves = tuple[str, ...]  # the ids of the sub-questions one task serves


def plan_step(doc: WorkflowDocument) -> StepDoc | None:
    """The step a user's own plan stands for: the first `expand` step that waits for no
    other (None: this workflow takes no plan)."""
    return next((s for s in doc.steps
                 if s.kind is DocStepKind.EXPAND and not s.after and not s.types), None)


def plans_first(doc: WorkflowDocument, routed: Container[str]) -> bool:
    """Whether a task is `initializing` while it plans: the plan step is the only one that
    starts at once (as `dag`'s planner is; a step a route picks, `routed`, waits for it)."""
    first = plan_step(doc)
    return first is not None and all(
        s.after or s is first or s.id in routed for s in doc.steps)


def most(step: Step) -> int:
    """The most subtasks a plan of this task may have."""
    return min(step.ctx.max_subtasks, MAX_PLANNED)


def plan_format(doc_step: StepDoc, most: int) -> str:
    """What the planner of `doc_step` is told to answer."""
    if not doc_step.types:
        return PLAN_FORMAT.format(most=most)
    types = "\n".join(f"- {name}: {kind.description or 'run by the ' + kind.role + ' role'}"
                      for name, kind in doc_step.types.items())
    if doc_step.questions is None:
        return TYPED_FORMAT.format(most=most, types=types)
    serving = " or ".join(n for n, kind in doc_step.types.items() if kind.serves)
    return QUESTIONS_FORMAT.format(most=most, types=types, serving=serving,
                                   least=doc_step.questions.min, most_q=doc_step.questions.max)


def plan_schema(doc_step: StepDoc, most: int, *, edited: bool = False) -> dict[str, Any]:
    """The JSON Schema a typed plan keeps. A person's edit (`edited`) may leave out the
    sub-questions and what each task serves (the request is then the one sub-question)."""
    task: dict[str, Any] = {"type": "object", "required": ["name", "type", "description"],
            "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 200},
                           "type": {"enum": list(doc_step.types)},
                           "description": {"type": "string", "minLength": 1},
                           "dependencies": {"type": "array",
                                            "items": {"type": ["string", "integer"]}}}}
    schema: dict[str, Any] = {"type": "object", "required": ["subtasks"], "properties": {
        "subtasks": {"type": "array", "minItems": 1, "maxItems": most, "items": task}}}
    asked = doc_step.questions
    if asked is None:
        return schema
    ids = {"type": "array", "items": {"type": "string", "pattern": QUESTION_ID}}
    task["properties"]["serves"] = ids
    serving = [n for n, kind in doc_step.types.items() if kind.serves]
    if not edited:
        task["allOf"] = [{"if": {"properties": {"type": {"enum": serving}}},
                          "then": {"required": ["serves"],
                                   "properties": {"serves": {"minItems": 1}}}}]
        schema["required"] = ["questions", "subtasks"]
    schema["properties"]["questions"] = {
        "type": "array", "minItems": asked.min, "maxItems": asked.max, "items": {
            "type": "object", "required": ["id", "question"],
            "properties": {"id": {"type": "string", "pattern": QUESTION_ID},
                           "question": {"type": "string", "minLength": 3,
                                        "maxLength": 1_000}}}}
    return schema


def questions_of(doc_step: StepDoc, plan: planning.Plan, kinds: tuple[str, ...],
                 answer: str | None, request: str) -> tuple[Questions, tuple[Serves, ...]]:
    """The sub-questions of a typed plan (the planner's, as `plan_schema` has them) and the
    ids each task serves. A plan that is not the planner's (the default one, say) has one
    sub-question, the request itself, served by every task of a serving type; an id no
    sub-question has is dropped, and a serving task left with none serves them all."""
    if doc_step.questions is None:
        return (), tuple(() for _ in kinds)
    serving = {n for n, kind in doc_step.types.items() if kind.serves}
    items: Any = None
    if plan.source != "default" and answer is not None:
        items = find_json(answer, prefer=lambda v: isinstance(v, dict)).value
    named: dict[str, str] = {}
    for q in (items.get("questions") if isinstance(items, dict) else None) or ():
        if isinstance(q, dict) and isinstance(q.get("id"), str) and str(q.get("question", "")):
            named.setdefault(q["id"], str(q["question"]).strip()[:1_000])
    questions = tuple(named.items())[:doc_step.questions.max] or (("q1", request[:1_000]),)
    known = [q for q, _ in questions]
    tasks = items.get("subtasks") if isinstance(items, dict) else None
    serves = []
    for i, kind in enumerate(kinds):
        said = tasks[i].get("serves") if isinstance(tasks, list) and i < len(tasks) and \
            isinstance(tasks[i], dict) else None
        ids = tuple(dict.fromkeys(s for s in said or () if s in known))
        serves.append((ids or tuple(known)) if kind in serving else ())
    return questions, tuple(serves)


def plan_json(plan: planning.Plan, kinds: tuple[str, ...], questions: Questions = (),
              serves: tuple[Serves, ...] = ()) -> str:
    """A typed plan in the planner's own format (to show a person, who may edit it)."""
    names = {p.key: p.name for p in plan.subtasks}
    tasks = [{"name": p.name, "type": kind, "description": p.description,
              "dependencies": [names[d] for d in p.dependencies]}
             | ({"serves": list(serves[i])} if i < len(serves) and serves[i] else {})
             for i, (p, kind) in enumerate(zip(plan.subtasks, kinds, strict=True))]
    asked = {"questions": [{"id": q, "question": text} for q, text in questions]} \
        if questions else {}
    return json.dumps(asked | {"subtasks": tasks}, indent=1, ensure_ascii=False)


def edited_plan(doc_step: StepDoc, text: str,
                most: int) -> tuple[planning.Plan, tuple[str, ...], str]:
    """A person's edit of a typed plan (and the text it came in), checked as the planner's
    answer is; `InvalidInput` saying what is wrong (nothing falls back)."""
    problem = contract_problem(text, plan_schema(doc_step, most, edited=True))
    if problem is not None:
        raise InvalidInput(f"The edited plan does not fit: {problem}",
                           details={"field": "answer"})
    plan, kinds = read_typed(doc_step, text, most)
    if plan.source != "planner":
        raise InvalidInput(f"The edited plan cannot be used: {' '.join(plan.notes)}",
                           details={"field": "answer"})
    return replace(plan, source="user"), kinds, text


def read_typed(doc_step: StepDoc, answer: str | None,
               most: int) -> tuple[planning.Plan, tuple[str, ...]]:
    """The typed plan in `answer` and each subtask's type; the document's default plan (with a
    note saying why) when there is no answer or it holds no usable plan."""
    if answer is not None:
        try:
            plan = planning.parse_planner_output(answer, max_subtasks=most)
            items = find_json(answer, prefer=lambda v: isinstance(v, dict)).value
            kinds = tuple(str(item["type"]) for item in items["subtasks"])
            if len(kinds) == len(plan.subtasks) and set(kinds) <= set(doc_step.types):
                return plan, kinds
            reason = "The planner's tasks name types the step does not have."
        except (InvalidInput, KeyError, TypeError) as exc:
            reason = exc.message if isinstance(exc, InvalidInput) else \
                "The planner's answer is not a typed plan."
    else:
        reason = "The planner gave no answer (it failed or timed out)."
    tasks = doc_step.default_plan
    if not tasks:
        raise InvalidInput(f"{reason} The step has no default plan.")
    plan = planning.user_plan([{"name": t.name, "description": t.description,
                                "dependencies": list(t.dependencies)} for t in tasks])
    return (replace(plan, source="default", notes=(f"{reason} Used the default plan.",)),
            tuple(t.type for t in tasks))


def add_planned(step: Step, doc: WorkflowDocument, doc_step: StepDoc, planner: SubtaskRecord,
                answer: str | None, prompt: Prompt) -> bool:
    """The runs of the subtasks the planner's `answer` plans; `prompt` renders a role's prompt
    for one (`{item}` is its name and description). With no `answer` (the planner failed for
    good), the request is planned by the fallbacks alone. False when nothing could be planned
    (a typed plan with no default)."""
    most = min(step.ctx.max_subtasks, MAX_PLANNED)
    kinds: tuple[str, ...] = ()
    try:
        if doc_step.types:
            plan, kinds = read_typed(doc_step, answer, most)
        else:
            plan = fallback_plans.decompose(answer, step.task.description,
                                      step.task.meta.requirements, max_subtasks=most)
    except InvalidInput as exc:
        graph.fail_task(step, f"Step '{doc_step.id}' has no plan: {exc.message}")
        return False
    for note in plan.notes:
        step.emit(EventType.NOTICE, level="warning", subtask_id=str(planner.id),
                  message=f"Step '{doc_step.id}': {note}")
    questions, serves = questions_of(doc_step, plan, kinds, answer, step.task.description)
    record_questions(step, planner, questions)
    add_plan(step, doc, doc_step, plan, planner.key, planner.options.seq, (planner.id,),
             prompt, kinds=kinds, questions=questions, serves=serves)
    return True


def record_questions(step: Step, planner: SubtaskRecord, questions: Questions) -> None:
    """Keep a plan's sub-questions with the run that planned it."""
    if questions:
        step.set_subtask(step.subtasks[planner.id],
                         options=evolve(step.subtasks[planner.id].options, questions=questions))


def add_plan(step: Step, doc: WorkflowDocument, doc_step: StepDoc, plan: planning.Plan,
             key: str, seq: int | None, after: tuple[uuid.UUID, ...],
             prompt: Prompt, options: tuple[Mapping[str, Any], ...] = (), *,
             kinds: tuple[str, ...] = (), questions: Questions = (),
             serves: tuple[Serves, ...] = ()) -> None:
    """One run `key.i` per subtask of `plan` (the planner's, or the user's own with its
    per-subtask `options`), each after `after` and the subtasks it depends on; in a typed
    plan, run by its type's role (`kinds`), in its wave (topological layer), told which of
    the plan's sub-questions it serves (`serves`)."""
    asked = dict(questions)
    ids = {p.key: step.ctx.new_ordered_id() for p in plan.subtasks}
    # The longest chain still ahead first, as the `dag` workflow schedules its plan.
    lengths = plan.path_lengths()
    waves = {k: n for n, layer in enumerate(dag.layers(plan.graph())) for k in layer} \
        if kinds else {}
    servers: dict[str, tuple[McpServerSpec, ...]] = {}  # each role's, made once
    for i, planned in enumerate(plan.subtasks, start=1):
        kind = kinds[i - 1] if kinds else None
        name = doc_step.types[kind].role if kind else doc_step.each
        assert name is not None  # the document check says so
        role = doc.roles[name]
        if name not in servers:
            servers[name] = role.mcp_specs()
        # Shoal's own options over the user's, set as the record is made (no copy after).
        ours: dict[str, Any] = {"seq": seq, "mcp_servers": servers[name]}
        if kind:
            ours.update(plan_type=kind, wave=waves[planned.key],
                        output_file=doc.result_filename if doc_step.types[kind].writes_result
                        else None, serves=serves[i - 1] if i <= len(serves) else ())
        own = (StepOptions.from_json(options[i - 1], **ours) if i <= len(options)
               else StepOptions(**ours))
        if role.builtin is not None:
            description = planned.description
        else:
            description = prompt(role, f"{planned.name}: {planned.description}" + "".join(
                f"\nIt serves sub-question {q}: {asked[q]}" for q in own.serves))
        sub = SubtaskRecord(
            id=ids[planned.key], task_id=step.task.id, key=f"{key}.{i}",
            role=name, kind=StepKind.AGENT, name=planned.name, description=description,
            status=SubtaskStatus.PENDING if planned.dependencies else SubtaskStatus.QUEUED,
            created_at=step.ctx.now,
            dependencies=(*after, *map(ids.__getitem__, planned.dependencies)),
            options=own,
            recommended_tool=role.tools[0] if role.tools else planned.recommended_tool,
            pinned_tool=planned.tool, complexity=planned.complexity,
            priority=lengths.get(planned.key, 1.0))
        # Announced by the plan's `task_update` below, as one event: its subtasks and what
        # each depends on stand for the plan's hand-overs (`messages.log` lists them; a
        # `message` event per planned run would cost the hot path ~4 % more calls).
        step.add_subtask(sub)
    step.emit(EventType.TASK_UPDATE, status=step.task.status.value, progress=step.task.progress,
              plan_source=plan.source, step=doc_step.id,
              plan=[graph.subtask_summary(step.subtasks[ids[p.key]]) for p in plan.subtasks],
              **({"types": list(kinds), "waves": max(waves.values(), default=-1) + 1}
                 if kinds else {}))

