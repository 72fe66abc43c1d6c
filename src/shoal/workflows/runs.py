"""What the handlers of a document's step kinds share, and the seam they plug into.

`DocumentWorkflow` looks each step's handler (`steps`) up by its kind (`DocStepKind`): a
`StepHandler` makes a round's runs when it may start, reads a run's answer, says what a
completed or failed run leads to, and takes a person's answer to a run that waits for one.
Each is given a `Runs`: the document's `Board` (what runs read), how a run is made and
announced, the facts a step must state, the stages; and the `Core` — what a handler may ask of
the interpreter (start a round of another step, a run done, a run failed for good, move on).
A new step kind is a new module with one handler in `steps`, registered in `interpreter.py`.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from itertools import repeat
from typing import Any, Protocol

from shoal.engine import answers, graph
from shoal.engine.model import StepKind, StepOutput, SubtaskRecord
from shoal.engine.options import StepOptions
from shoal.engine.step import Step
from shoal.events import EventType
from shoal.states import TERMINAL_TASK, SubtaskStatus, transition
from shoal.workflows import learning, mentions, messages
from shoal.workflows import stages as stage_machine
from shoal.workflows.blackboard import as_mapping, contract_problem, item_order, whole
from shoal.workflows.board import Board
from shoal.workflows.document import DocStepKind, StepDoc
from shoal.workflows.routing import Decision

PREVIEW_CHARS = 2_000  # of an entry in its `state_update` event (the whole: GET …/state)


@dataclass(frozen=True, slots=True)
class Round:
    """A round of a step that may start: the runs it comes after, the `{feedback}` a loop
    carried to it, and the stage a loop goes back through (`via`)."""

    deps: tuple[uuid.UUID, ...]
    feedback: str = ""
    via: str | None = None


@dataclass(frozen=True, slots=True)
class Reading:
    """A run's answer as its step kind reads it: the output (checked against its contract),
    and a route's decision."""

    output: StepOutput
    decision: Decision | None = None


class Core(Protocol):
    """What a step kind's handler may ask of the interpreter."""

    def run(self, step: Step, doc_step: StepDoc, *, feedback: str | None,
            deps: tuple[uuid.UUID, ...] | None = None, via: str | None = None) -> None:
        """Start a round of `doc_step` (by its own kind's handler)."""

    def done(self, step: Step, doc_step: StepDoc, sub: SubtaskRecord,
             decision: Decision | None = None) -> None:
        """`sub` completed: its round may be whole, and what comes after may start."""

    def failed(self, step: Step, sub: SubtaskRecord, why: str) -> None:
        """`sub` failed for good (`why`)."""

    def move_on(self, step: Step) -> None:
        """Start what may start, show progress, end the task when nothing more may run."""

    def refused(self, step: Step, sub: SubtaskRecord, why: str, problem: str) -> None:
        """`sub`'s answer missed its contract again (`problem`): it fails for good, or its
        plan type takes it over."""


class StepHandler(Protocol):
    """How the runs of one kind of step go (`DocumentWorkflow` holds one per `DocStepKind`)."""

    def start(self, step: Step, doc_step: StepDoc, rnd: Round) -> None:
        """A round of `doc_step` may start: make its runs (or decide without one)."""

    def read(self, step: Step, doc_step: StepDoc, sub: SubtaskRecord,
             output: StepOutput) -> Reading | None:
        """A run of `doc_step` answered: its answer as the step takes it (None: it was sent
        back or failed instead)."""

    def completed(self, step: Step, doc_step: StepDoc, sub: SubtaskRecord,
                  reading: Reading) -> bool:
        """A run completed: True if the step goes on by itself (else it is `Core.done`)."""

    def failed(self, step: Step, doc_step: StepDoc, sub: SubtaskRecord, why: str) -> bool:
        """A run failed for good: True if the step takes it over (else a route goes on
        without it, or the task fails)."""

    def decided(self, step: Step, doc_step: StepDoc, sub: SubtaskRecord,
                answer: str | None) -> None:
        """A person answered (or let go on) a run of `doc_step` that waited for them."""


class Runs:
    """The state every handler is given: the board, the core, and how runs are made."""

    def __init__(self, board: Board, core: Core) -> None:
        self.board = board
        self.core = core

    # ---- a new round and its runs -----------------------------------------------------------

    def opened(self, step: Step, doc_step: StepDoc, via: str | None) -> tuple[int, int] | None:
        """Number a new round of `doc_step` (round, seq), once the task may move to its stage
        (`enter_stage`); None: the document does not allow the move, and the task failed."""
        if self.board.doc.stages is not None and not self.enter_stage(step, doc_step, via):
            return None
        number = len(self.board.rounds(step, doc_step.id)) + 1
        seq = 1 + len({s.options.seq for s in step.subtasks.values() if s.options.seq})
        return number, seq

    def new_run(self, step: Step, doc_step: StepDoc, *, key: str, name: str, role_name: str,
                prompt: str, seq: int, deps: tuple[uuid.UUID, ...]) -> SubtaskRecord:
        """A run of `doc_step` by `role_name` (its own role, or one it delegates to)."""
        doc = self.board.doc
        role = doc.roles.get(role_name)
        sub = SubtaskRecord(
            id=step.ctx.new_ordered_id(), task_id=step.task.id, key=key, role=role_name, name=name,
            kind=StepKind.EXPAND if doc_step.kind is DocStepKind.EXPAND else StepKind.AGENT,
            description=prompt, status=SubtaskStatus.QUEUED, created_at=step.ctx.now,
            dependencies=deps, options=StepOptions(
                seq=seq, mcp_servers=role.mcp_specs() if role else (),
                output_file=self.output_file(doc_step) if role_name == doc_step.role
                else None),
            recommended_tool=role.tools[0] if role and role.tools
            else next(iter(step.task.tool_preferences), None),
            priority=float(len(doc.steps) - doc.steps.index(doc_step)))
        step.add_subtask(sub)
        self.emit_created(step, sub)
        return sub

    def one_run(self, step: Step, doc_step: StepDoc, number: int, index: int | None, seq: int,
                *, deps: tuple[uuid.UUID, ...], feedback: str, item: str = "",
                asked: str = "") -> None:
        """One run of the step's own role: key `step#round` (`step#round.item` for a map
        step's item), its role's prompt rendered, then what it is told to state and the
        answer's form (`asked`)."""
        key = f"{doc_step.id}#{number}" + (f".{index}" if index is not None else "")
        name = doc_step.id + (f" {index}" if index is not None else "") + (
            f" (round {number})" if number > 1 else "")
        role = self.board.doc.roles[doc_step.role] if doc_step.role else None
        prompt = self.board.prompt(step, doc_step, role, feedback, item) + self.to_state(
            step, doc_step) + asked
        self.new_run(step, doc_step, key=key, name=name, role_name=doc_step.role or
                     doc_step.id, prompt=prompt, seq=seq, deps=deps)

    def emit_created(self, step: Step, sub: SubtaskRecord) -> None:
        """A new run's `subtask_update`, and a `message` event for each hand-over it
        receives (`messages`)."""
        graph.emit_subtask(step, sub)
        received = messages.received(self.board.doc, step.task.description, step.subtasks,
                                     sub, self.board.revision_of(step))
        if received:
            step.emit(EventType.MESSAGE, messages=[e.wire() for e in received])

    def output_file(self, doc_step: StepDoc) -> str | None:
        """The file a run's answer also becomes: the document's result, when it is text (an
        `agent` step writing the `result` entry with a role that has no JSON contract)."""
        doc = self.board.doc
        role = doc.roles.get(doc_step.role or "")
        if (doc_step.entry != doc.result_entry or doc_step.kind is not DocStepKind.AGENT
                or role is None or role.output is not None):
            return None
        return doc.result_filename

    def progress(self, step: Step) -> None:
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
        for r in self.board.routes:  # the choices a route's plan left out are not work to do
            if self.board.value(step, (r.plan or "").split(".")[0], "") is not None:
                left_out |= set(r.choices) - set(self.board.route_state(step, r).planned)
        ids = self.board.step_ids
        wanted = ids if not left_out else [sid for sid in ids if sid not in left_out]
        progress = 5 + int(90 * sum(map(credit.get, wanted, repeat(0.0))) / max(len(wanted), 1))
        if progress > step.task.progress and step.task.status not in TERMINAL_TASK:
            step.set_task(progress=progress)
            graph.emit_task_update(step)

    # ---- a run's answer ---------------------------------------------------------------------

    def state_update(self, step: Step, doc_step: StepDoc, sub: SubtaskRecord) -> None:
        """A `state_update` event: `doc_step`'s entry has a new revision."""
        runs = self.board.same_round(step, sub)
        value = self.board.entry(step, doc_step.entry, "")
        step.emit(EventType.STATE_UPDATE, entry=doc_step.entry, step=doc_step.id,
                  revision=self.board.revision(step, doc_step),
                  subtask_ids=[str(r.id) for r in sorted(runs, key=item_order)],
                  preview=value[:PREVIEW_CHARS], truncated=len(value) > PREVIEW_CHARS)

    def send_back(self, step: Step, sub: SubtaskRecord, problem: str) -> None:
        """Queue `sub` again, told the problem with its answer (the one repair it gets)."""
        sub = step.set_subtask(sub, status=transition(sub.status, SubtaskStatus.QUEUED),
                               current_attempt_id=None, error=problem,
                               options=replace(sub.options, repair=problem))
        graph.emit_subtask(step, sub, repair=True)

    def checked(self, step: Step, sub: SubtaskRecord, text: str, contract: Mapping[str, Any],
                output: StepOutput) -> StepOutput | None:
        """`output` with the answer checked against the role's contract; None when the run
        was sent back to repair it, or failed (`Core.refused`)."""
        problem = contract_problem(text, contract)
        if problem is None:
            return replace(output, answers=True,
                           parsed=as_mapping(answers.extract_json(text)))
        if not sub.options.repair:
            self.send_back(step, sub, problem)
            return None
        self.core.refused(step, sub, f"Step '{sub.name}' answered twice without matching its "
                                     f"contract: {problem}", problem)
        return None

    def answer_checked(self, step: Step, sub: SubtaskRecord,
                       output: StepOutput) -> StepOutput | None:
        """`output` checked against the contract of the role that ran `sub`, if it has one
        (None: sent back, or failed)."""
        role = self.board.doc.roles.get(sub.role)
        if role is None or role.output is None:
            return output
        return self.checked(step, sub, output.text, role.output, output)

    def person_answered(self, step: Step, doc_step: StepDoc, sub: SubtaskRecord,
                        text: str) -> None:
        """A run a person decided completes with what they said; its entry has a revision."""
        sub = graph.complete(step, sub, StepOutput(text=text))
        self.state_update(step, doc_step, sub)

    # ---- the facts a step must state (`requires_facts`) -------------------------------------

    def states_facts(self, step: Step, doc_step: StepDoc, sub: SubtaskRecord,
                     output: StepOutput) -> bool:
        """Whether a checked answer may be kept: one of a step with `requires_facts` that
        leaves out a known fact is sent back once (False), then kept with a notice."""
        if doc_step.requires_facts is None:
            return True
        missing = mentions.left_out(output.text or "", self.required(step, doc_step))
        if not missing:
            return True
        if not sub.options.repair:
            self.send_back(step, sub, mentions.SENT_BACK + mentions.described(missing))
            return False
        step.emit(EventType.NOTICE, level="warning", subtask_id=str(sub.id), message=(
            f"Step '{doc_step.id}' leaves out what the user told: "
            f"{mentions.described(missing)}."))
        return True

    def required(self, step: Step, doc_step: StepDoc) -> dict[str, learning.Told]:
        """The known facts a step with `requires_facts` must state: those its source step's
        latest round learned (its answer holds the record)."""
        needs = doc_step.requires_facts
        if needs is None:
            return {}
        latest = [r for r in self.board.rounds(step, needs.source) if whole(r)][-1:]
        final = latest[0][-1].output if latest else None
        record = learning.record_in(final.parsed if final is not None else None)
        return {n: t for n, t in record.known().items() if not needs.facts or n in needs.facts}

    def to_state(self, step: Step, doc_step: StepDoc) -> str:
        """What a run of a step with `requires_facts` is told to state."""
        known = self.required(step, doc_step)
        if not known:
            return ""
        source = doc_step.requires_facts.source if doc_step.requires_facts else ""
        return (f"\n\nWhat '{source}' was told: state each fact where it belongs, as told (an "
                "answer that leaves one out is sent back):\n" + "\n".join(
                    f"- {name}: {json.dumps(told.wire()['value'], ensure_ascii=False)}"
                    for name, told in known.items()))

    # ---- the document's stages (`stages`) ----------------------------------------------------

    def enter_stage(self, step: Step, doc_step: StepDoc, via: str | None = None) -> bool:
        """Move the task to `doc_step`'s stage (a `stage` event; through a loop's `via`
        stage, two), or fail it saying why the document does not allow the move; False
        then."""
        stages, stage = self.board.doc.stages, doc_step.stage
        if stages is None or stage is None:
            return True
        now = self.stage_now(step.subtasks.values(), completed=False) or stages.initial
        if (why := stage_machine.refusal(stages, now, doc_step.id, stage, via)) is not None:
            graph.fail_task(step, why)
            return False
        if via is not None and via != now:
            step.emit(EventType.STAGE, stage=via, previous=now, step=doc_step.id)
            now = via
        if stage != now:
            step.emit(EventType.STAGE, stage=stage, previous=now, step=doc_step.id)
        return True

    def stage_now(self, subtasks: Iterable[SubtaskRecord], *, completed: bool) -> str | None:
        """The task's declared stage (None: the document declares none)."""
        stages, steps = self.board.doc.stages, self.board.steps
        if stages is None:
            return None
        return stage_machine.stage_of(stages, (
            (s.options.seq or 0, steps[s.key.split("#", 1)[0]].stage)
            for s in subtasks if s.key.split("#", 1)[0] in steps), completed)
