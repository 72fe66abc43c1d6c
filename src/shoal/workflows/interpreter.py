"""A workflow document, run: the `Workflow` protocol for any `WorkflowDocument`.

Each run of a step is one subtask (`key` `step#n`), created when it may start: when every step
it comes `after` has a completed run newer than its own last run (`StepOptions.seq` orders the
task's runs). Its prompt is rendered then, from the task's description (`{query}`), its
parameters, and the blackboard: the latest completed run of the step that `writes` each entry
(`{draft}`, or `{feedback.verdict}` for a field of an answer with a contract). A role with an
output contract answers in JSON, checked against the contract's JSON Schema; a wrong answer is
sent back once with the problem (the repair), and fails the step if the repair is wrong too.
When a step that a loop goes back from completes and the loop's condition holds, the loop's
target runs again (at most `max` times) with the carried entry as `{feedback}`, and the steps
after the looping one wait for the next round. The task completes when nothing runs and
nothing more may start.

A `map` step's round is one run per item of an earlier entry's list (`over: plan.sub_questions`,
each prompt naming its `{item}`), run in parallel; its entry is the list of their answers, in
item order, once every item is done.

A `route` step's runs ask its router which of its `choices` runs next, after each one it
picked; `routing` holds the answer to the document's rules. The steps it picks run only when
picked, and after its `finish` it decides no more. `expand` steps (`expansion`) run the
subtasks their role plans; `human` and `gate` steps (`people`) wait for a person, if need be.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import replace
from itertools import repeat
from typing import Any

from shoal.engine import answers, graph, quality, quality_loop
from shoal.engine.inputs import CheckpointDecision, CheckpointExpired, Finished, Start
from shoal.engine.model import (
    SERVING_KINDS,
    FileRef,
    StepKind,
    StepOutput,
    SubtaskRecord,
    TaskRecord,
)
from shoal.engine.options import StepOptions
from shoal.engine.step import Step
from shoal.engine.workflow import Decided
from shoal.errors import Conflict
from shoal.events import EventType
from shoal.states import TERMINAL_SUBTASK, TERMINAL_TASK, SubtaskStatus, TaskStatus, transition
from shoal.workflows import (
    checks,
    dag_roles,
    expansion,
    mentions,
    messages,
    people,
    phases,
    questions,
    routing,
)
from shoal.workflows.blackboard import (
    as_mapping,
    contract_problem,
    item_order,
    round_seq,
    whole,
)
from shoal.workflows.board import MAX_ENTRY_CHARS
from shoal.workflows.conversations import NO_ANSWER, ConversationRuns
from shoal.workflows.document import (
    BuiltinRole,
    DocStepKind,
    Loop,
    StepDoc,
    WorkflowDocument,
)
from shoal.workflows.gated_runs import GatedRuns
from shoal.workflows.route_runs import RouteRuns
from shoal.workflows.routing import DecidedBy, Decision
from shoal.workflows.staged_runs import StagedRuns

_PEOPLE = {DocStepKind.HUMAN: StepKind.HUMAN, DocStepKind.GATE: StepKind.GATE}
MAX_ITEMS = 50  # the most subtasks one map step fans out to
PREVIEW_CHARS = 2_000  # of an entry in its `state_update` event (the whole: GET …/state)


class DocumentWorkflow(RouteRuns, GatedRuns, StagedRuns, ConversationRuns):
    """Runs one workflow document."""

    def __init__(self, doc: WorkflowDocument) -> None:
        super().__init__(doc)
        self.quality = quality_loop.QualityLoop(self)  # for `quality` steps
        self.phased = phases.phased(doc)

    # ---- the protocol ---------------------------------------------------------------------

    def start(self, step: Step, inp: Start) -> None:
        if step.task.status is not TaskStatus.PENDING or step.subtasks:
            raise Conflict("The task has already started.", code="already_started")
        planning = inp.plan is None and self.plans_first()
        step.set_task(status=transition(step.task.status, TaskStatus.INITIALIZING if planning
                                        else TaskStatus.IN_PROGRESS), started_at=step.ctx.now)
        graph.emit_task_update(step)
        if inp.plan is not None:  # the user's own plan stands for the first expand step's
            planned = self.plan_step()
            assert planned is not None  # the API lets a plan through only then
            expansion.add_plan(step, self.doc, planned, inp.plan, f"{planned.id}#1", 1, (),
                               self._planned_prompt(step, planned), inp.options)
        self._start_ready(step)
        self._progress(step)

    def plans_first(self) -> bool:
        """Whether the task is `initializing` while it plans: the plan step is the only one
        that starts at once (as `dag`'s planner is)."""
        first = self.plan_step()
        return first is not None and all(
            s.after or s is first or s.id in self._route_of for s in self.doc.steps)

    def plan_step(self) -> StepDoc | None:
        """The step a user's own plan stands for: the first `expand` step that waits for no
        other (None: this workflow takes no plan)."""
        return next((s for s in self.doc.steps
                     if s.kind is DocStepKind.EXPAND and not s.after and not s.types), None)

    def step_done(self, step: Step, sub: SubtaskRecord, result: Finished) -> None:
        asked = tuple(dict(d) for d in result.denials if d.get("needs_human"))
        output = StepOutput(text=result.output,
                            files=tuple(FileRef.from_json(f) for f in result.files),
                            rejected_files=tuple(dict(r) for r in result.rejected_files),
                            usage=dict(result.usage), approval_requests=asked)
        role = self.doc.roles.get(sub.role)  # an expand step's planned runs: their own role
        if sub.kind in SERVING_KINDS and sub.options.plan_type is not None:  # a typed gate's
            if role is not None and role.output is not None:  # judge, or a retry of its task
                checked = self._checked_answer(step, sub, result.output, role.output, output)
                if checked is None:
                    return
                output = checked
            self._gate_step_done(step, sub, output)
            self._move_on(step)
            return
        if sub.kind in SERVING_KINDS:  # a quality step of a run (`quality: true`)
            self._serving_done(step, sub, result, output)
            return
        doc_step = self._step_of(sub)
        contract = role.output if role is not None else None
        if sub.kind is StepKind.EXPAND and doc_step.types:
            contract = expansion.plan_schema(doc_step, self._most(step))
        decision = None
        if doc_step.kind is DocStepKind.ROUTE:
            decision = routing.decide(doc_step, self._route_state(step, doc_step),
                                      result.output)
            output = replace(output, answers=True, parsed=decision.wire())
        elif (question := self._question(step, doc_step, sub, result.output)) is not None:
            output = replace(output, answers=True, parsed=question)  # it asks first
        elif contract is not None:
            checked = self._checked_answer(step, sub, result.output, contract, output)
            if checked is None:
                return
            output = checked
        if (told := self._told(step, doc_step, sub, output)) is None:
            return  # sent back: it leaves out facts a conversation learned (`facts`)
        output = told
        planning = sub.kind is StepKind.EXPAND
        if asked and decision is None and not planning:  # a person decides what it asked
            quality_loop.approval_request(step, sub, output)
            return
        # A typed plan's run whose type has a gate: its judge decides what comes next.
        if sub.options.plan_type is not None and self._gated(step, sub, output):
            self._progress(step)
            return
        if doc_step.quality and not planning and decision is None and quality_loop.quality_on(
                step.task, sub):
            sub = step.set_subtask(sub, status=transition(sub.status, SubtaskStatus.VERIFYING),
                                   output=output, progress=90, error=None)
            graph.emit_subtask(step, sub)
            quality_loop.verify(step, sub)  # `accepted` goes on once the loop accepts it
            return
        sub = graph.complete(step, sub, output)
        if doc_step.asks is not None and self._next_turn(step, doc_step, sub):
            self._progress(step)  # a question asked, or answered: the conversation goes on
            return
        if planning:
            self._planned(step)
            self._plan_or_ask(step, doc_step, sub, result.output)
            return
        self._done(step, doc_step, sub, decision)

    def _done(self, step: Step, doc_step: StepDoc, sub: SubtaskRecord,
              decision: Decision | None = None) -> None:
        """A run completed (and, with `quality`, was accepted): its round may be whole, and
        what comes after may start."""
        if sub.options.plan_type is not None:  # a typed plan's runs: in waves, or eagerly
            self._release(step, doc_step, sub)
        else:  # an expand step's planned runs wait on others
            graph.queue_ready_dependents(step, sub)
        total, done = step.round_counts().get(sub.key.partition(".")[0], (0, 0))
        if done < total:  # a map or expand step's round is whole once every run is done;
            self._progress(step)  # until then nothing new may start (counted, not scanned)
            return
        if any(s.status is not SubtaskStatus.COMPLETED for s in self._round(step, sub)):
            self._move_on(step)
            return
        self._state_update(step, doc_step, sub)
        if decision is not None:
            self._take(step, doc_step, decision, sub)
        elif doc_step.id in self._route_of:
            self._after_routed(step, doc_step, sub)
        self._maybe_loop(step, doc_step, sub)
        self._move_on(step)

    def _serving_done(self, step: Step, sub: SubtaskRecord, result: Finished,
                      output: StepOutput) -> None:
        """A quality step ended: its answer read as the `dag` workflow reads it; the loop
        decides what its target does next."""
        answered = quality_loop.quality_output(step, sub, result.output, output)
        if answered is None:
            return  # requeued once to repair an answer that was not valid JSON
        if sub.kind is StepKind.CORRECT and answered.approval_requests:
            quality_loop.approval_request(step, sub, answered)
            return
        self.quality.step_done(step, graph.complete(step, sub, answered))

    def attempt_failed(self, step: Step, sub: SubtaskRecord, error: str) -> bool:
        """A planner's failed attempt is not retried: its step plans by the fallbacks at once
        (as `dag`'s planner does); any other run is retried, and a typed plan's run whose
        retries are spent may degrade (`_typed_failure`)."""
        if sub.kind is not StepKind.EXPAND:
            return not step.ctx.retry.should_retry(sub.attempts) and self._typed_failure(
                step, sub, f"{error} (after {sub.attempts} attempt(s))")
        sub = step.set_subtask(sub, status=transition(sub.status, SubtaskStatus.FAILED),
                               error=error, completed_at=step.ctx.now)
        graph.emit_subtask(step, sub)
        self._failed(step, sub, f"The planner did not produce a plan ({error}).")
        return True

    def gave_up(self, step: Step, sub: SubtaskRecord, error: str) -> None:
        # A quality step's target goes on without it, as in `dag` (a typed gate's: `_failed`).
        if sub.kind in SERVING_KINDS and sub.options.plan_type is None:
            step.emit(EventType.NOTICE, level="warning", subtask_id=str(sub.id),
                      message=f"'{sub.name}' failed after {sub.attempts} attempt(s): {error}")
            self.quality.step_done(step, sub)
            return
        self._failed(step, sub, f"Step '{sub.name}' failed after {sub.attempts} attempt(s): "
                                f"{error}")

    def accepted(self, step: Step, sub: SubtaskRecord, *, first_time: bool) -> None:
        """The quality loop accepted a run of a `quality` step (again, after a person's
        correction: its entry's value changed, not its revision)."""
        if first_time:
            self._frequency(step)
            self._done(step, self._step_of(sub), sub)
        else:
            self._state_update(step, self._step_of(sub), sub)
            graph.resume(step)
            self._move_on(step)

    def _frequency(self, step: Step) -> None:
        """The seed's checkpoint frequency, over the runs of `quality` steps: a run counts once,
        when first accepted (before the task may complete)."""
        if step.task.status is not TaskStatus.IN_PROGRESS:
            return
        runs = [s for s in step.subtasks.values()
                if s.kind is StepKind.AGENT and self._step_of(s).quality]
        done = sum(1 for s in runs if s.status is SubtaskStatus.COMPLETED)
        if quality.frequency_checkpoint(step.task.checkpoint_frequency, done, len(runs)):
            quality_loop.open_checkpoint(
                step, "frequency", None,
                message=f"{done} of {len(runs)} subtasks are done (checkpoint frequency: "
                        f"{step.task.checkpoint_frequency}).")

    def handle(self, step: Step, inp: Decided) -> None:
        """A person decided a question or a gate (or its deadline passed); anything else is
        the quality loop's (its checkpoints, and quality steps no worker can take)."""
        open_cp = (step.checkpoints.get(inp.checkpoint_id)
                   if isinstance(inp, CheckpointDecision | CheckpointExpired) else None)
        if open_cp is None or open_cp.reason not in (people.QUESTION, people.GATE, people.PLAN):
            self.quality.handle(step, inp)
            self._move_on(step)
            return
        if isinstance(inp, CheckpointExpired):
            action = open_cp.deadline_action
            if action not in ("approve", "reject"):  # escalate: it keeps waiting, flagged
                step.set_checkpoint(open_cp, deadline_at=None,
                                    data={**open_cp.data, "escalated": True})
                step.emit(EventType.NOTICE, level="warning", message=(
                    f"A {open_cp.reason} waited past its deadline and was escalated: it still "
                    "waits for a person."))
                return
            inp = CheckpointDecision(open_cp.id, "reject" if action == "reject" else "answer"
                                     if open_cp.reason == people.QUESTION else "approve",
                                     None, reason="Its deadline passed.")
        assert isinstance(inp, CheckpointDecision)
        planned = self._steps.get(str(open_cp.data.get("step")))
        edited = expansion.edited_plan(planned, inp.answer or "", self._most(step)) if (
            open_cp.reason == people.PLAN and inp.action == "answer" and planned) else None
        cp = people.decided(step, inp)
        if inp.action == "reject":
            graph.cancel(step, f"Rejected at a {cp.reason}" + (f": {inp.reason}"
                                                               if inp.reason else "."))
            return
        if cp.reason == people.PLAN and planned is not None:
            self._plan_decided(step, planned, step.subtasks[cp.subtask_id or uuid.UUID(int=0)],
                               edited)
            return
        sub = step.subtasks[cp.subtask_id] if cp.subtask_id else None
        if sub is not None and sub.status is SubtaskStatus.IN_PROGRESS:
            said = inp.answer if inp.action == "answer" else \
                f"A person let the task go on: {cp.data.get('message', '')}"
            self._person_done(step, sub, said)
        graph.resume(step)
        self._move_on(step)

    def phase(self, step: Step) -> str:
        return phases.phase_of(self.doc, step.task.status, step.subtasks.values(),
                               [cp.reason for cp in step.checkpoints.values()])

    def phases_moved(self, before: str, after: str) -> Sequence[str]:
        return phases.moved(before, after)

    def completion(self, step: Step) -> Mapping[str, Any]:
        """The revisions of each entry; with `quality` steps, the mean scores as in `dag`."""
        revisions = {entry: self._revision(step, s) for entry, s in self._writer.items()}
        done: dict[str, Any] = {"state": {entry: n for entry, n in revisions.items() if n}}
        if self.doc.stages is not None:
            done["stage"] = self.stage_now(step.subtasks.values(), completed=True)
        gaps = [s.name for s in step.subtasks.values() if s.options.gap]
        if gaps:  # a typed plan that degraded: its result is partial
            done |= {"partial": True, "gaps": gaps}
        if asked := questions.status(step.subtasks.values()):  # "n of m answered", counted
            done["questions"] = questions.summary(asked)
        if (cited := checks.figures(step.subtasks.values())) is not None:  # computed in code
            done["citations"] = cited
        if not any(s.quality for s in self.doc.steps):
            return done
        return done | {"evaluation_scores": quality_loop.task_scores(step)}

    def instructions(
        self, task: TaskRecord, sub: SubtaskRecord, tools: Sequence[str], *,
        target: SubtaskRecord | None = None, files: Mapping[str, str] | None = None,
        guidance: Sequence[str] = (),
    ) -> str:
        role = self.doc.roles.get(sub.role)
        builtin = role.builtin if role is not None else None
        if (sub.kind in SERVING_KINDS and sub.options.plan_type is None) or \
                builtin is not None:  # seed 004's own prompts
            return dag_roles.instructions_for(task, sub, tools, target=target, files=files,
                                              guidance=guidance,
                                              planner=builtin is BuiltinRole.PLANNER)
        return sub.description + (mentions.sent_back(sub.options.repair)
                                   if sub.options.repair else "")

    # ---- runs -----------------------------------------------------------------------------

    def _move_on(self, step: Step) -> None:
        """Start what may start, show progress, and end the task once nothing runs and
        nothing more may start."""
        self._start_ready(step)
        self._progress(step)
        if (step.task.status is TaskStatus.IN_PROGRESS and not step.checkpoints
                and all(s.status in TERMINAL_SUBTASK for s in step.subtasks.values())
                and not any(self._ready(step, s) for s in self.doc.steps)):
            self._mark_partial(step)  # a plan that skipped runs for its budget says so
            graph.complete_task(self, step)

    def _failed(self, step: Step, sub: SubtaskRecord, why: str) -> None:
        """`sub` failed for good: a routed step's route goes on without it (the steps that
        require it are skipped); any other step fails the task."""
        if sub.kind in SERVING_KINDS and self._typed_failure(step, sub, why):
            self._move_on(step)  # a typed gate's judge or retry: its task goes on
            return
        doc_step = self._step_of(sub)
        if sub.kind is StepKind.EXPAND:  # the plan failed
            if sub.status is not SubtaskStatus.FAILED:
                sub = step.set_subtask(sub, status=transition(sub.status, SubtaskStatus.FAILED),
                                       error=why, completed_at=step.ctx.now)
                graph.emit_subtask(step, sub)
            step.emit(EventType.NOTICE, level="warning", subtask_id=str(sub.id),
                      message=f"{why.rstrip('.')}. Step '{doc_step.id}' plans without it.")
            self._planned(step)
            self._plan_or_ask(step, doc_step, sub, None)
            return
        if doc_step.kind is DocStepKind.ROUTE:  # the engine decides in the router's place
            fallback = routing.decide(doc_step, self._route_state(step, doc_step), None)
            self._take(step, doc_step, Decision(fallback.next, DecidedBy.FALLBACK, reason=(
                f"the router failed ({sub.error or 'no answer'})")), sub)
            self._move_on(step)
            return
        route = self._route_of.get(doc_step.id)
        if route is None or doc_step.id == route.finish:
            graph.fail_task(step, why)
            return
        gone = routing.skipped(route, self._route_state(step, route))
        step.emit(EventType.NOTICE, level="warning", subtask_id=str(sub.id),
                  message=f"{why.rstrip('.')}. Route '{route.id}' goes on without it"
                          + ("; skipped: " + "; ".join(gone.values()) if gone else "") + ".")
        self._after_routed(step, doc_step, sub)
        self._move_on(step)

    def _planned(self, step: Step) -> None:
        """The plan is made (or its planner failed): the task is no longer initializing."""
        if step.task.status is TaskStatus.INITIALIZING:
            step.set_task(status=transition(step.task.status, TaskStatus.IN_PROGRESS))

    def _progress(self, step: Step) -> None:
        """5 % for starting, then the share of the document's steps that have completed a
        round, a round in flight by its share of runs done (a loop going back does not take
        progress back; a plan is done once its subtasks are)."""
        credit: dict[str, float] = {}
        for key, (total, done) in step.round_counts().items():
            sid = key.partition("#")[0]
            share = done / total if total else 0.0
            if share > credit.get(sid, 0.0):
                credit[sid] = share
        left_out = set(step.task.meta.skip)
        for r in self._routes:  # the choices a route's plan left out are not work to do
            if self._value(step, (r.plan or "").split(".")[0], "") is not None:
                left_out |= set(r.choices) - set(self._route_state(step, r).planned)
        wanted = self._step_ids if not left_out else [
            sid for sid in self._step_ids if sid not in left_out]
        progress = 5 + int(90 * sum(map(credit.get, wanted, repeat(0.0))) / max(len(wanted), 1))
        if progress > step.task.progress and step.task.status not in TERMINAL_TASK:
            step.set_task(progress=progress)
            graph.emit_task_update(step)

    def _start_ready(self, step: Step) -> None:
        """Create a round of every step that may start now (none once the task has ended),
        again while a step that ends at once (a passing gate) lets more start."""
        while step.task.status not in TERMINAL_TASK:
            before = len(step.subtasks)
            for doc_step in self.doc.steps:
                if step.task.status in TERMINAL_TASK:
                    return
                if self._ready(step, doc_step) and doc_step.kind is DocStepKind.ROUTE:
                    self._hop(step, doc_step, self._deps(step, doc_step))
                elif self._ready(step, doc_step):
                    self._run(step, doc_step, feedback=None)
            if len(step.subtasks) == before:
                return

    def _after(self, step: Step, doc_step: StepDoc) -> list[str]:
        """The steps `doc_step` waits for: its `after`, a step the user skipped replaced by
        the steps that one waits for."""
        skip = step.task.meta.skip
        found: list[str] = []
        for dep in doc_step.after:
            for sid in (self._after(step, self._steps[dep]) if dep in skip else [dep]):
                if sid not in found:
                    found.append(sid)
        return found

    def _ready(self, step: Step, doc_step: StepDoc) -> bool:
        if doc_step.id in step.task.meta.skip or doc_step.id in self._route_of:
            return False  # a routed step runs when its route picks it
        if doc_step.kind is DocStepKind.ROUTE and doc_step.finish in step.task.meta.skip:
            return False
        rounds = self._rounds(step, doc_step.id)
        if doc_step.kind is DocStepKind.ROUTE and (
                rounds or self._rounds(step, doc_step.finish or "")):
            return False  # it started: its later decisions follow the steps it picks
        if rounds and any(s.status not in TERMINAL_SUBTASK for s in rounds[-1]):
            return False
        after = self._after(step, doc_step)
        if not after:
            return not rounds
        newest = 0
        for dep in after:
            last = self._rounds(step, dep)[-1:]
            if not last or not whole(last[0]) or any(s.options.looped for s in last[0]):
                return False
            newest = max(newest, round_seq(last[0]))
        return not rounds or newest > round_seq(rounds[-1])

    def _deps(self, step: Step, doc_step: StepDoc) -> tuple[uuid.UUID, ...]:
        """The runs a new round of `doc_step` comes after: the latest of each step it waits
        for (of a step that asks, its last turn: the answer)."""
        return tuple(s.id for dep in self._after(step, doc_step)
                     for s in (self._rounds(step, dep)[-1][-1:] if self._steps[dep].asks
                               else self._rounds(step, dep)[-1]))

    def _run(self, step: Step, doc_step: StepDoc, *, feedback: str | None,
             deps: tuple[uuid.UUID, ...] | None = None, via: str | None = None) -> None:
        """Start a round of `doc_step`: one run, one per item for a map step, the first turn
        of a conversation for a step that asks (once the task may move to its stage, through
        a loop's `via`: `_enter_stage`)."""
        if self.doc.stages is not None and not self._enter_stage(step, doc_step, via):
            return
        number = len(self._rounds(step, doc_step.id)) + 1
        seq = 1 + len({s.options.seq for s in step.subtasks.values() if s.options.seq})
        if deps is None:
            deps = self._deps(step, doc_step)
        if doc_step.kind in _PEOPLE:
            self._person_step(step, doc_step, number, seq, deps)
            return
        if doc_step.asks is not None:
            self._turn(step, doc_step, number, 1, seq, deps, feedback or "")
            return
        if doc_step.kind is not DocStepKind.MAP:
            self._add(step, doc_step, number, None, seq, deps, feedback or "", "")
            return
        assert doc_step.over is not None  # the document check says so
        entry, _, path = doc_step.over.partition(".")
        items = self._value(step, entry, path)
        if not isinstance(items, list) or not items:
            graph.fail_task(step, f"Step '{doc_step.id}' maps over '{doc_step.over}', which "
                                  "holds no list of items.")
            return
        if len(items) > MAX_ITEMS:
            step.emit(EventType.NOTICE, level="warning",
                      message=f"'{doc_step.over}' lists {len(items)} items; step "
                              f"'{doc_step.id}' takes the first {MAX_ITEMS}.")
        for i, item in enumerate(items[:MAX_ITEMS], start=1):
            text = item if isinstance(item, str) else json.dumps(item)
            self._add(step, doc_step, number, i, seq, deps, feedback or "",
                      text[:MAX_ENTRY_CHARS])

    def _add(self, step: Step, doc_step: StepDoc, number: int, index: int | None, seq: int,
             deps: tuple[uuid.UUID, ...], feedback: str, item: str) -> None:
        """One run: key `step#round` (`step#round.item` for a map step's item)."""
        key = f"{doc_step.id}#{number}" + (f".{index}" if index is not None else "")
        name = doc_step.id + (f" {index}" if index is not None else "") + (
            f" (round {number})" if number > 1 else "")
        role = self.doc.roles[doc_step.role] if doc_step.role else None
        prompt = self._prompt(step, doc_step, role, feedback, item) + self._to_state(step,
                                                                                  doc_step)
        if doc_step.kind is DocStepKind.ROUTE:
            options = ", ".join(self._allowed(step, doc_step))
            prompt += ("\n\nAnswer with only this JSON, naming one of " + options + ':\n'
                       '{"next": "<step>", "reason": "<why, in a sentence>"}')
        elif doc_step.kind is DocStepKind.EXPAND and (role is None or role.builtin is None):
            prompt += expansion.plan_format(doc_step, self._most(step))
        self._new_run(step, doc_step, key=key, name=name, role_name=doc_step.role or
                      doc_step.id, prompt=prompt, seq=seq, deps=deps)

    def _new_run(self, step: Step, doc_step: StepDoc, *, key: str, name: str, role_name: str,
                 prompt: str, seq: int, deps: tuple[uuid.UUID, ...]) -> SubtaskRecord:
        """A run of `doc_step` by `role_name` (its own role, or one it delegates to)."""
        role = self.doc.roles.get(role_name)
        sub = SubtaskRecord(
            id=step.ctx.new_id(), task_id=step.task.id, key=key, role=role_name, name=name,
            kind=StepKind.EXPAND if doc_step.kind is DocStepKind.EXPAND else StepKind.AGENT,
            description=prompt, status=SubtaskStatus.QUEUED, created_at=step.ctx.now,
            dependencies=deps, options=StepOptions(
                seq=seq, mcp_servers=role.mcp_specs() if role else (),
                output_file=self._output_file(doc_step) if role_name == doc_step.role
                else None),
            recommended_tool=role.tools[0] if role and role.tools
            else next(iter(step.task.tool_preferences), None),
            priority=float(len(self.doc.steps) - self.doc.steps.index(doc_step)))
        step.add_subtask(sub)
        self._emit_created(step, sub)
        return sub

    def _emit_created(self, step: Step, sub: SubtaskRecord) -> None:
        """A new run's `subtask_update`, and a `message` event for each hand-over it
        receives (`messages`)."""
        graph.emit_subtask(step, sub)
        received = messages.received(self.doc, step.task.description, step.subtasks, sub,
                                     self._revision_of(step))
        if received:
            step.emit(EventType.MESSAGE, messages=[e.wire() for e in received])

    # ---- steps a person decides (`people`) -------------------------------------------------

    def _person_step(self, step: Step, doc_step: StepDoc, number: int, seq: int,
                     deps: tuple[uuid.UUID, ...]) -> None:
        """A `human` step asks its question; a `gate` compares now and asks only if it must.
        Neither goes to a worker: the subtask is in progress until decided."""
        question = self._render(step, doc_step, doc_step.question or "", "", "")
        sub = SubtaskRecord(
            id=step.ctx.new_id(), task_id=step.task.id, key=f"{doc_step.id}#{number}",
            role=doc_step.kind.value, kind=_PEOPLE[doc_step.kind],
            name=doc_step.id + (f" (round {number})" if number > 1 else ""),
            description=question or f"Gate: {doc_step.over} at least {doc_step.min_score:g}",
            status=SubtaskStatus.IN_PROGRESS, created_at=step.ctx.now,
            started_at=step.ctx.now, dependencies=deps, options=StepOptions(seq=seq))
        step.add_subtask(sub)
        self._emit_created(step, sub)
        if doc_step.kind is DocStepKind.HUMAN:
            people.ask(step, sub, people.QUESTION, f"Step '{doc_step.id}' asks: {question}",
                       question)
            return
        assert doc_step.over is not None  # the document check says so
        entry, _, path = doc_step.over.partition(".")
        passed, verdict = people.judged(step, doc_step, sub, self._value(step, entry, path))
        if passed:
            self._person_done(step, sub, verdict)

    def _person_done(self, step: Step, sub: SubtaskRecord, text: str | None) -> None:
        doc_step = self._step_of(sub)
        if doc_step.asks is not None:  # a person's answer goes back to the step's role
            sub = graph.complete(step, sub, StepOutput(text=text or NO_ANSWER))
            self._next_turn(step, doc_step, sub)
            return
        sub = graph.complete(step, sub, StepOutput(text=text or ""))
        self._state_update(step, doc_step, sub)

    def _state_update(self, step: Step, doc_step: StepDoc, sub: SubtaskRecord) -> None:
        runs = self._round(step, sub)
        value = self._entry(step, doc_step.entry, "")
        step.emit(EventType.STATE_UPDATE, entry=doc_step.entry, step=doc_step.id,
                  revision=self._revision(step, doc_step),
                  subtask_ids=[str(r.id) for r in sorted(runs, key=item_order)],
                  preview=value[:PREVIEW_CHARS], truncated=len(value) > PREVIEW_CHARS)

    def _output_file(self, doc_step: StepDoc) -> str | None:
        """The file a run's answer also becomes: the document's result, when it is text (an
        `agent` step writing the `result` entry with a role that has no JSON contract)."""
        role = self.doc.roles.get(doc_step.role or "")
        if (doc_step.entry != self.doc.result_entry or doc_step.kind is not DocStepKind.AGENT
                or role is None or role.output is not None):
            return None
        return self.doc.result_filename

    def _maybe_loop(self, step: Step, doc_step: StepDoc, sub: SubtaskRecord) -> None:
        for loop in self._loops_from.get(doc_step.id, ()):
            if loop.to in step.task.meta.skip:
                continue
            target = self._steps[loop.to]
            done = len(self._rounds(step, target.id)) - 1
            cap = self._cap(step.task, loop.max)
            if not self._holds(step, loop):
                continue
            if done >= cap:
                said = (f"'{loop.source}' asked to go back to '{loop.to}' again, but the loop "
                        f"ran its {cap} time(s)")
                if self._switch(step.task, loop.ask_at_cap):  # a person decides
                    people.ask(step, sub, people.GATE, f"{said}.", "Approve to go on with "
                               "what it has (its open points listed); reject to stop.")
                    continue
                step.emit(EventType.NOTICE, level="warning", subtask_id=str(sub.id),
                          message=f"{said}; going on.")
                continue
            for run in self._round(step, sub):
                step.set_subtask(run, options=replace(run.options, looped=True))
            carried = self._entry(step, loop.carry or loop.when.entry, "")
            self._run(step, target, feedback=carried, via=loop.via)
            return

    def _holds(self, step: Step, loop: Loop) -> bool:
        value = self._value(step, loop.when.entry, loop.when.field or "")
        return value is not None and value == loop.when.equals

    # ---- the blackboard -------------------------------------------------------------------

    def _checked_answer(self, step: Step, sub: SubtaskRecord, text: str,
                        contract: Mapping[str, Any], output: StepOutput) -> StepOutput | None:
        """`output` with the answer checked against the role's contract; None when the step
        was sent back to repair it, or failed."""
        problem = contract_problem(text, contract)
        if problem is None:
            return replace(output, answers=True,
                           parsed=as_mapping(answers.extract_json(text)))
        if not sub.options.repair:
            self._send_back(step, sub, problem)
            return None
        why = f"Step '{sub.name}' answered twice without matching its contract: {problem}"
        if self._typed_failure(step, sub, why):  # a typed plan's run may degrade instead
            self._move_on(step)
            return None
        sub = step.set_subtask(sub, status=transition(sub.status, SubtaskStatus.FAILED),
                               error=problem, completed_at=step.ctx.now,
                               current_attempt_id=None)
        graph.emit_subtask(step, sub)
        self._failed(step, sub, why)
        return None
