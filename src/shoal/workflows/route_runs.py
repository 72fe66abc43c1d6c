"""How a document's `route` steps run (`DocumentWorkflow` mixes this in): the router is asked
after every step it picked, unless nothing is left to pick or the hop cap is reached; what it
decides (or the engine, in its place: `routing`) is a `route_decision` event and the next run.
"""

from __future__ import annotations

import uuid

from shoal.engine.model import SubtaskRecord
from shoal.engine.step import Step
from shoal.events import EventType
from shoal.states import TERMINAL_TASK, SubtaskStatus
from shoal.workflows import routing
from shoal.workflows.board import Board
from shoal.workflows.document import StepDoc
from shoal.workflows.routing import DecidedBy, Decision, RouteState

MAX_FIELD_CHARS = 12_000  # of `{agent_outputs}` in a prompt


class RouteRuns(Board):
    """The route half of `DocumentWorkflow`; the host provides how a step runs."""

    def _run(self, step: Step, doc_step: StepDoc, *, feedback: str | None,
             deps: tuple[uuid.UUID, ...] | None = None) -> None:
        raise NotImplementedError

    def _route_state(self, step: Step, route: StepDoc) -> RouteState:
        plan = None
        if route.plan is not None:
            entry, _, path = route.plan.partition(".")
            plan = self._value(step, entry, path)
        runs = sorted((s for s in step.subtasks.values()
                       if s.key.split("#", 1)[0] in route.choices),
                      key=lambda s: s.options.seq or 0)
        latest = {s.key.split("#", 1)[0]: s.status for s in runs}
        return RouteState(
            planned=routing.planned_choices(route, plan),
            ran=tuple(s.key.split("#", 1)[0] for s in runs
                      if s.status is SubtaskStatus.COMPLETED),
            failed=frozenset(n for n, st in latest.items() if st is SubtaskStatus.FAILED))

    def _allowed(self, step: Step, route: StepDoc) -> list[str]:
        """What the router may name now: the choices that may run, then the finish."""
        return [*routing.allowed(route, self._route_state(step, route)), route.finish or ""]

    def _hop(self, step: Step, route: StepDoc, deps: tuple[uuid.UUID, ...]) -> None:
        """The route decides again: the router is asked, unless nothing is left to choose
        or the route made its `max_hops` decisions."""
        state = self._route_state(step, route)
        cap = self._cap(step.task, route.max_hops)
        if not routing.allowed(route, state):
            self._take(step, route, routing.decide(route, state, None), None, deps)
        elif len(self._rounds(step, route.id)) >= cap:
            assert route.finish is not None
            self._take(step, route, Decision(route.finish, DecidedBy.ENGINE, reason=(
                f"the route made its {cap} decision(s) (max_hops)")), None, deps)
        else:
            self._run(step, route, feedback=None, deps=deps)

    def _take(self, step: Step, route: StepDoc, decision: Decision, sub: SubtaskRecord | None,
              deps: tuple[uuid.UUID, ...] | None = None) -> None:
        """Run the step `decision` names, after the router's run (`sub`) or `deps`."""
        state = self._route_state(step, route)
        step.emit(EventType.ROUTE_DECISION, route=route.id, **decision.wire(),
                  hop=len(self._rounds(step, route.id)), subtask_id=str(sub.id) if sub else None,
                  execution_order=list(state.ran), planned=list(state.planned))
        if decision.by is not DecidedBy.ROUTER:
            said = f"named '{decision.asked}'" if decision.asked else "was not asked"
            step.emit(EventType.NOTICE, level="info" if decision.by is DecidedBy.ENGINE
                      else "warning", subtask_id=str(sub.id) if sub else None,
                      message=f"Route '{route.id}': the router {said}; running "
                              f"'{decision.next}' because {decision.reason}.")
        self._run(step, self._steps[decision.next], feedback=None,
                  deps=(sub.id,) if sub is not None else deps)

    def _after_routed(self, step: Step, doc_step: StepDoc, sub: SubtaskRecord) -> None:
        """A step a route picked has ended: the route decides again (not after its finish)."""
        route = self._route_of[doc_step.id]
        if doc_step.id != route.finish and step.task.status not in TERMINAL_TASK:
            self._hop(step, route, (sub.id,))

    def _route_field(self, step: Step, route: StepDoc | None, name: str) -> str:
        if route is None:
            return ""
        state = self._route_state(step, route)
        if name == "allowed":
            return ", ".join(self._allowed(step, route))
        if name == "execution_order":
            return ", ".join(state.ran) or "(nothing has run yet)"
        outputs = [(n, self._value(step, self._steps[n].entry, ""))
                   for n in dict.fromkeys(state.ran)]
        return routing.describe(outputs)[:MAX_FIELD_CHARS] or "(none yet)"
