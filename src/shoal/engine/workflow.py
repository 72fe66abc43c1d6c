"""The seam every way of organising agents plugs into: the `Workflow` protocol.

`graph.decide` runs what all workflows share (attempts, fencing, retries, dependents, pausing,
task endings) and asks the task's workflow, found by `task.workflow` in `shoal.workflows`'
registry, what the rest means: how a task starts, what a finished step's output leads to, what
a failure does, and what a worker is told to do for a step. A workflow changes the working copy
(`Step`) through `graph`'s functions and its own; like the rest of the engine it does no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from shoal.engine.inputs import CheckpointDecision, CheckpointExpired, Finished, Start, Unplaceable
from shoal.engine.model import SubtaskRecord, TaskRecord
from shoal.engine.step import Step

Decided = CheckpointDecision | CheckpointExpired | Unplaceable
"""The inputs a workflow's own policies answer (checkpoints and steps no worker can take)."""


class Workflow(Protocol):
    """One way of organising agents, interpreted by the engine."""

    phased: bool
    """Whether its tasks go through named phases (`phase`): then each decision that moves a
    task to another phase says so in a `phase` event."""

    @property
    def name(self) -> str:
        """The name tasks give in `workflow` to run this one."""
        ...

    @property
    def description(self) -> str:
        """What it does, in a sentence or two, for the list of workflows."""
        ...

    def start(self, step: Step, inp: Start) -> None:
        """The task was created: add its first steps and move it out of `pending`."""

    def step_done(self, step: Step, sub: SubtaskRecord, result: Finished) -> None:
        """An attempt of `sub` succeeded: record its output and move the task on."""

    def attempt_failed(self, step: Step, sub: SubtaskRecord, error: str) -> bool:
        """An attempt of `sub` failed; True if the workflow took it over (no retry)."""

    def gave_up(self, step: Step, sub: SubtaskRecord, error: str) -> None:
        """`sub` failed for good, its retries spent (it is marked failed already)."""

    def accepted(self, step: Step, sub: SubtaskRecord, *, first_time: bool) -> None:
        """A quality policy accepted `sub`'s output: its dependents may run."""

    def handle(self, step: Step, inp: Decided) -> None:
        """A checkpoint decision or expiry, or a step no connected worker can take."""

    def budget_ran_out(self, step: Step, why: str) -> None:
        """The task's budget ran out (`why`: what was spent of which limit, "9,120 tokens of
        9,000") and it has just ended `budget_exceeded`: write what can be written from what
        is done (a partial result), or nothing."""

    def completion(self, step: Step) -> Mapping[str, Any]:
        """What the `task_complete` event says besides the status and usage."""

    def phase(self, step: Step) -> str:
        """The phase the task is in (asked only of a workflow that is `phased`)."""

    def phases_moved(self, before: str, after: str) -> Sequence[str]:
        """The phases a task went through in one decision, from `before` to `after` (`after`
        last): more than one where a phase began and ended within it."""

    def instructions(
        self, task: TaskRecord, sub: SubtaskRecord, tools: Sequence[str], *,
        target: SubtaskRecord | None = None, files: Mapping[str, str] | None = None,
        guidance: Sequence[str] = (),
    ) -> str:
        """The prompt a worker's tool receives for `sub`."""
