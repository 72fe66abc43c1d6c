"""The budget's reserve in a typed plan: what the runs of its `reserved` types (those that
produce the result: a synthesis, the report and its review, say) will cost, kept back before
any run that may be skipped (`if_budget_short: gap`) starts. `to_skip` says which runs not
started yet are skipped (lowest priority first) so that what the plan still needs stays under
the budget; `may_start` holds back those runs while their cost is unknown; `retry_fits` says
whether a gate's retry fits beside the rest.

A reserved run not done yet is estimated from what it will read: its prompt, and the answers of
the tasks it depends on as it will be given them (each at its length once done; before that, at
what completed runs of its type answered, or, for another reserved run, at what that one is
estimated to write), at `CHARS_PER_TOKEN`; plus, per model call, the overhead the completed
runs show beyond their prompts (a system prompt, say); an answer as long as what it is given or
as the longest a completed run wrote; its gate's judge, which reads the prompt and the answer;
and, for a type with a `check`, the one repair the check may ask for, which reads the prompt
and the answer again. A run that may be skipped costs what each completed one of them cost,
its gate's runs and retries included. Until one has completed that is not known (such runs
call tools, whose results they read too): it is estimated as a reserved run is, a low bound,
and such runs start one at a time. Any other run costs what each completed run of the plan
cost. Everything is estimated again at every decision, from the subtasks as they are, so the
reserve shrinks as runs are skipped (their answers are then one line) and follows what the
runs really cost.

Pure: the estimate reads a `Step` and changes nothing; `gated_runs` acts on it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from shoal.engine import graph
from shoal.engine.model import Budget, StepKind, SubtaskRecord
from shoal.engine.step import Step
from shoal.states import SubtaskStatus
from shoal.workflows.plan_types import IfFailed, PlanType

CHARS_PER_TOKEN = 4  # what a model reads and writes per token, about (English text)
GAP_CHARS = 160  # what a skipped task's `<gap>` line adds to the prompts of those after it
JUDGE_ANSWER = 64  # tokens of a judge's answer before any judge has answered
SHORT = "the task's budget cannot cover"  # in the reason of every run skipped for the budget
STARTED = frozenset({SubtaskStatus.QUEUED, SubtaskStatus.IN_PROGRESS, SubtaskStatus.VERIFYING,
                     SubtaskStatus.CORRECTING})


@dataclass(frozen=True, slots=True)
class Reading:
    """How much a run reads, as `gated_runs` writes its prompts: `answer`, the length of a
    completed run's answer as it is handed on; `given`, what the answers of the tasks a run
    depends on (their lengths) add to its prompt; `judged`, what the judge of a run of that
    type reads, given the run's prompt and answer lengths."""

    answer: Callable[[SubtaskRecord], int]
    given: Callable[[Sequence[int]], int]
    judged: Callable[[PlanType, int, int], int]


def tokens_of(usage: Mapping[str, object]) -> int:
    """Input and output tokens in a usage report."""
    return sum(int(v) for k, v in usage.items()
               if k in ("input_tokens", "output_tokens") and isinstance(v, int | float))


class Estimate:
    """What the runs of one typed plan will still cost, estimated at one decision."""

    def __init__(self, step: Step, runs: Sequence[SubtaskRecord],
                 kind_of: Callable[[SubtaskRecord], PlanType | None], reading: Reading) -> None:
        self.runs = list(runs)  # the plan's runs, in plan order
        self.kinds = {r.id: k for r in self.runs if (k := kind_of(r)) is not None}
        self.reading = reading
        ids = {r.id for r in self.runs}
        self._serving: dict[uuid.UUID, list[SubtaskRecord]] = {}
        for sub in step.subtasks.values():
            if sub.target_id in ids:
                self._serving.setdefault(sub.target_id, []).append(sub)
        self._live: dict[uuid.UUID, int] = {}
        for att in step.attempts.values():
            self._live[att.subtask_id] = self._live.get(att.subtask_id, 0) + tokens_of(att.usage)
        finished = [s for s in step.subtasks.values() if s.output is not None
                    and tokens_of(s.output.usage)]
        # What each call adds beyond its prompt: the least any finished run shows (a run that
        # called tools read their results too, and shows more).
        self.overhead = min((max(0, int(s.output.usage.get("input_tokens", 0))
                                 - len(s.description) // CHARS_PER_TOKEN)
                             for s in finished if s.output is not None), default=0)
        self.longest = max((int(s.output.usage.get("output_tokens", 0)) for s in finished
                            if s.output is not None and s.kind is StepKind.AGENT), default=0)
        self.judge_answer = max((int(s.output.usage.get("output_tokens", 0)) for s in finished
                                 if s.output is not None and s.kind is StepKind.JUDGE),
                                default=JUDGE_ANSWER)
        done = [r for r in self.runs if r.status is SubtaskStatus.COMPLETED]
        costs = [c for r in done if self.skippable(r) and (c := self.spent_by(r))]
        self.unit: float | None = sum(costs) / len(costs) if costs else None
        others = [c for r in done if (c := self.spent_by(r))]
        self._mean = sum(others) / len(others) if others else None

    # ---- what a run is ------------------------------------------------------------------

    def skippable(self, run: SubtaskRecord) -> bool:
        kind = self.kinds.get(run.id)
        return kind is not None and kind.if_budget_short is IfFailed.GAP

    def reserved(self, run: SubtaskRecord) -> bool:
        kind = self.kinds.get(run.id)
        return kind is not None and kind.reserved

    def spent_by(self, run: SubtaskRecord) -> int:
        """Tokens `run` has cost: its answer's, its gate's runs' (judges, retries), and what
        their live attempts have reported so far."""
        total = 0
        for sub in (run, *self._serving.get(run.id, ())):
            total += self._live.get(sub.id, 0)
            if sub.output is not None:
                total += tokens_of(sub.output.usage)
        return total

    def waiting(self) -> list[SubtaskRecord]:
        """The runs that may still be skipped: of a skippable type, not started yet."""
        return [r for r in self.runs
                if r.status is SubtaskStatus.PENDING and self.skippable(r)]

    # ---- what the rest costs ------------------------------------------------------------

    def ahead(self, skipped: Iterable[uuid.UUID] = (), *,
              besides: uuid.UUID | None = None) -> int:
        """Tokens the runs not completed will still spend, were the runs `skipped` skipped
        (and not counting `besides`, a run being decided): the reserve, and the rest."""
        return round(sum(self._remaining(set(skipped), besides).values()))

    def reserve(self) -> int:
        """Tokens the reserved runs not completed will still spend."""
        return round(sum(v for k, v in self._remaining(set(), None).items()
                         if k in self.kinds and self.kinds[k].reserved))

    def _remaining(self, skipped: set[uuid.UUID],
                   besides: uuid.UUID | None) -> dict[uuid.UUID, float]:
        """What each run not completed will still spend (tokens), in plan order, each told
        what the ones before it answered (or will)."""
        answers: dict[uuid.UUID, int] = {}
        left: dict[uuid.UUID, float] = {}
        for run in self.runs:
            if run.status is SubtaskStatus.COMPLETED:
                answers[run.id] = self.reading.answer(run)
            elif run.id in skipped:
                answers[run.id] = GAP_CHARS
            else:
                cost, answers[run.id] = self._cost(run, answers)
                if run.id != besides:
                    left[run.id] = max(0.0, cost - self.spent_by(run))
        return left

    def _cost(self, run: SubtaskRecord, answers: Mapping[uuid.UUID, int]) -> tuple[float, int]:
        """What `run` costs in all (tokens) and how long its answer will be (characters)."""
        if self.skippable(run) and self.unit is not None:
            return self.unit, self._typical_answer(run)
        given = [answers.get(d, 0) for d in run.dependencies if d in answers]
        if not self.reserved(run) and not self.skippable(run) and self._mean is not None:
            return self._mean, self._typical_answer(run)
        prompt = len(run.description) + (self.reading.given(given)
                                         if run.status is SubtaskStatus.PENDING else 0)
        written = max(self.longest, sum(given) // CHARS_PER_TOKEN)
        cost = prompt / CHARS_PER_TOKEN + self.overhead + written
        kind = self.kinds.get(run.id)
        if kind is not None and kind.gate is not None:
            judged = self.reading.judged(kind, prompt, written * CHARS_PER_TOKEN)
            cost += judged / CHARS_PER_TOKEN + self.overhead + self.judge_answer
        if kind is not None and kind.check is not None:  # the repair its check may ask for:
            cost += prompt / CHARS_PER_TOKEN + self.overhead + 2 * written  # it reads its answer
        return cost, written * CHARS_PER_TOKEN

    def _typical_answer(self, run: SubtaskRecord) -> int:
        """How long a run's answer will be: as those of its type that completed, else as those
        of the runs that may be skipped, else nothing known."""
        kind = run.options.plan_type
        done = [r for r in self.runs if r.status is SubtaskStatus.COMPLETED and not r.options.gap]
        for same in ([r for r in done if r.options.plan_type == kind],
                     [r for r in done if self.skippable(r)]):
            if same:
                return sum(self.reading.answer(r) for r in same) // len(same)
        return 0


def short(budget: Budget, spent: tuple[int, float], ahead: int) -> bool:
    """Whether spending `ahead` more tokens reaches a limit of `budget`, having spent `spent`
    (tokens, dollars): dollars at what each token has cost so far."""
    tokens, cost = spent
    rate = cost / tokens if tokens else 0.0
    return ((budget.tokens is not None and tokens + ahead >= budget.tokens)
            or (budget.cost_usd is not None and cost + ahead * rate >= budget.cost_usd))


def to_skip(step: Step, est: Estimate) -> list[SubtaskRecord]:
    """The runs not started yet that are skipped to keep the reserve: lowest priority first
    (the later in the plan among equals), while what the plan still needs reaches the
    budget."""
    budget = step.task.meta.budget
    if budget is None:
        return []
    spent = graph.spending(step.task, step.attempts.values())
    order = sorted(est.waiting(), key=lambda s: (s.priority, -_index(s)))
    skipped: list[SubtaskRecord] = []
    while order and short(budget, spent, est.ahead(s.id for s in skipped)):
        skipped.append(order.pop(0))
    return skipped


def may_start(est: Estimate, ready: Sequence[SubtaskRecord]) -> list[SubtaskRecord]:
    """Those of `ready` that may start now: all, once what a run that may be skipped costs is
    known; before that, of those runs, only one at a time (the highest priority, the earlier in
    the plan among equals), while none of them is running."""
    if est.unit is not None:
        return list(ready)
    asked = {r.id for r in ready}
    running = any(r.status in STARTED and r.id not in asked for r in est.runs
                  if est.skippable(r))
    first = min((r for r in ready if est.skippable(r)), default=None,
                key=lambda s: (-s.priority, _index(s)))
    return [r for r in ready if not est.skippable(r) or (r is first and not running)]


def retry_fits(step: Step, est: Estimate, target: SubtaskRecord) -> bool:
    """Whether the budget covers another try of `target` (about what its first try and its
    judging cost) beside what the rest of the plan still needs."""
    budget = step.task.meta.budget
    if budget is None:
        return True
    spent = graph.spending(step.task, step.attempts.values())
    return not short(budget, spent, est.ahead(besides=target.id) + est.spent_by(target))


def _index(sub: SubtaskRecord) -> int:
    return int(sub.key.rpartition(".")[2])
