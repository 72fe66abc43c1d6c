"""The `route` step's handler: the router is asked after every step it picked, unless nothing is
left to pick or the hop cap is reached; what it decides (or the engine, in its place:
`routing`) is a `route_decision` event and the next run. A step a route picks that fails for
good is gone from the route's choices (`without`); its finish's failure fails the task.
"""

from __future__ import annotations

from dataclasses import replace

from shoal.engine import graph
from shoal.engine.model import StepOutput, SubtaskRecord
from shoal.engine.step import Step
from shoal.events import EventType
from shoal.states import TERMINAL_TASK
from shoal.workflows import routing
from shoal.workflows.document import StepDoc
from shoal.workflows.routing import DecidedBy, Decision
from shoal.workflows.runs import Reading, Round, Runs


class RouteStep:
    """Runs `route` steps, and moves a route on after the steps it picked."""

    def __init__(self, runs: Runs) -> None:
        self.runs = runs
        self.board = runs.board

    def start(self, step: Step, doc_step: StepDoc, rnd: Round) -> None:
        """The route decides again: the router is asked, unless nothing is left to choose
        or the route made its `max_hops` decisions."""
        route = doc_step
        state = self.board.route_state(step, route)
        cap = self.board.cap(step.task, route.max_hops)
        if not routing.allowed(route, state):
            self.take(step, route, routing.decide(route, state, None), None, rnd)
        elif len(self.board.rounds(step, route.id)) >= cap:
            assert route.finish is not None
            self.take(step, route, Decision(route.finish, DecidedBy.ENGINE, reason=(
                f"the route made its {cap} decision(s) (max_hops)")), None, rnd)
        elif (opened := self.runs.opened(step, route, rnd.via)) is not None:
            number, seq = opened
            options = ", ".join(self.board.allowed(step, route))
            self.runs.one_run(step, route, number, None, seq, deps=rnd.deps, feedback="",
                              asked="\n\nAnswer with only this JSON, naming one of " + options
                              + ':\n{"next": "<step>", "reason": "<why, in a sentence>"}')

    def read(self, step: Step, doc_step: StepDoc, sub: SubtaskRecord,
             output: StepOutput) -> Reading:
        """The router's answer, read as a decision (the engine's, where it is not one)."""
        decision = routing.decide(doc_step, self.board.route_state(step, doc_step), output.text)
        return Reading(replace(output, answers=True, parsed=decision.wire()), decision)

    def completed(self, step: Step, doc_step: StepDoc, sub: SubtaskRecord,
                  reading: Reading) -> bool:
        return False  # its round is whole: `take` its decision (`Core.done`)

    def failed(self, step: Step, doc_step: StepDoc, sub: SubtaskRecord, why: str) -> bool:
        """The router failed: the engine decides in its place."""
        fallback = routing.decide(doc_step, self.board.route_state(step, doc_step), None)
        self.take(step, doc_step, Decision(fallback.next, DecidedBy.FALLBACK, reason=(
            f"the router failed ({sub.error or 'no answer'})")), sub)
        self.runs.core.move_on(step)
        return True

    def decided(self, step: Step, doc_step: StepDoc, sub: SubtaskRecord,
                answer: str | None) -> None:
        self.runs.person_answered(step, doc_step, sub, answer or "")

    def take(self, step: Step, route: StepDoc, decision: Decision, sub: SubtaskRecord | None,
             rnd: Round | None = None) -> None:
        """Run the step `decision` names, after the router's run (`sub`) or `rnd`'s deps."""
        state = self.board.route_state(step, route)
        step.emit(EventType.ROUTE_DECISION, route=route.id, **decision.wire(),
                  hop=len(self.board.rounds(step, route.id)),
                  subtask_id=str(sub.id) if sub else None,
                  execution_order=list(state.ran), planned=list(state.planned))
        if decision.by is not DecidedBy.ROUTER:
            said = f"named '{decision.asked}'" if decision.asked else "was not asked"
            step.emit(EventType.NOTICE, level="info" if decision.by is DecidedBy.ENGINE
                      else "warning", subtask_id=str(sub.id) if sub else None,
                      message=f"Route '{route.id}': the router {said}; running "
                              f"'{decision.next}' because {decision.reason}.")
        self.runs.core.run(step, self.board.steps[decision.next], feedback=None,
                           deps=(sub.id,) if sub is not None else rnd.deps if rnd else None)

    def after_routed(self, step: Step, doc_step: StepDoc, sub: SubtaskRecord) -> None:
        """A step a route picked has ended: the route decides again (not after its finish)."""
        route = self.board.route_of[doc_step.id]
        if doc_step.id != route.finish and step.task.status not in TERMINAL_TASK:
            self.start(step, route, Round(deps=(sub.id,)))

    def without(self, step: Step, doc_step: StepDoc, sub: SubtaskRecord, why: str) -> None:
        """`sub` failed for good: a step a route picked is gone from its choices (the steps
        that require it are skipped) and the route goes on; any other fails the task."""
        route = self.board.route_of.get(doc_step.id)
        if route is None or doc_step.id == route.finish:
            graph.fail_task(step, why)
            return
        gone = routing.skipped(route, self.board.route_state(step, route))
        step.emit(EventType.NOTICE, level="warning", subtask_id=str(sub.id),
                  message=f"{why.rstrip('.')}. Route '{route.id}' goes on without it"
                          + ("; skipped: " + "; ".join(gone.values()) if gone else "") + ".")
        self.after_routed(step, doc_step, sub)
        self.runs.core.move_on(step)
