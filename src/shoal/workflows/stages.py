"""Declared stages (seed 003's stage machine), for any document: `stages` names each stage and
the stages that may follow it; each step belongs to one (`stage:`). The check refuses an
`after` edge or a loop whose stages the document does not let follow each other (the line
named); the engine, as it starts a round of a step, moves the task to that step's stage and
fails the task, saying why, when the move is not allowed (`enter`). The task's stage is that of
its latest round (`stage_of`), said in a `stage` event at each move and in the task's detail.

```yaml
stages:
  initial: init
  allowed: {init: [interviewing], interviewing: [problem_formulation], …,
            quality_control: [complete, refinement], refinement: [problem_formulation]}
  final: complete          # where a completed task ends (optional)
loops:
  - {from: qc, to: problem, via: refinement, …}   # qc's stage → refinement → problem's stage
```
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

NAME = r"^[a-z][a-z0-9_]{0,39}$"
Name = Annotated[str, Field(pattern=NAME)]
Path = tuple[str | int, ...]


class Stages(BaseModel):
    """A document's stages: the first, the moves allowed, and the last."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    initial: Name = Field(description="The stage a task starts in.")
    allowed: dict[Name, list[Name]] = Field(
        min_length=1, description="Each stage and the stages that may follow it (staying is "
                                  "always allowed).")
    final: Name | None = Field(default=None,
                               description="The stage a completed task ends in.")

    def names(self) -> set[str]:
        found = {self.initial, *self.allowed, *(n for v in self.allowed.values() for n in v)}
        return found | ({self.final} if self.final else set())

    def may(self, before: str, after: str) -> bool:
        """Whether the stage `after` may follow `before` (staying is always allowed)."""
        return before == after or after in self.allowed.get(before, ())


def problems(stages: Stages | None, steps: list[Any], loops: list[Any]) -> list[tuple[Path, str]]:
    """What breaks the declared stages: a step without one (or with one that is not
    declared), an `after` edge or a loop between stages that may not follow each other, a
    step that starts first from a stage the initial one may not move to."""
    if stages is None:
        refused: list[tuple[Path, str]] = []
        refused += [(("steps", i, "stage"), "declare `stages` to give steps a stage")
                    for i, s in enumerate(steps) if s.stage is not None]
        refused += [(("loops", i, "via"), "declare `stages` to give a loop a stage to pass")
                    for i, loop in enumerate(loops) if loop.via is not None]
        return refused
    known = stages.names()
    found: list[tuple[Path, str]] = []
    of = {s.id: s.stage for s in steps}
    for i, step in enumerate(steps):
        if step.stage is None or step.stage not in known:
            found.append((("steps", i, "stage"), f"a step of a document with stages needs one "
                                                 f"of: {', '.join(sorted(known))}"))
            continue
        if not step.after and not stages.may(stages.initial, step.stage):
            found.append((("steps", i, "stage"), f"'{step.stage}' may not come first: the "
                                                 f"initial stage '{stages.initial}' does not "
                                                 "move to it"))
        for j, dep in enumerate(step.after):
            if of.get(dep) and not stages.may(of[dep], step.stage):
                found.append((("steps", i, "after", j), f"stage '{step.stage}' may not follow "
                                                        f"'{of[dep]}' (after '{dep}')"))
    for i, loop in enumerate(loops):
        a, b = of.get(loop.source), of.get(loop.to)
        if loop.via is not None and loop.via not in known:
            found.append((("loops", i, "via"), f"no stage '{loop.via}' in stages"))
        elif a and b and loop.via is not None and not (stages.may(a, loop.via)
                                                        and stages.may(loop.via, b)):
            found.append((("loops", i, "via"), f"the loop goes from stage '{a}' through "
                                               f"'{loop.via}' back to '{b}', which the "
                                               "stages do not allow"))
        elif a and b and loop.via is None and not stages.may(a, b):
            found.append((("loops", i, "to"), f"the loop goes from stage '{a}' back to '{b}', "
                                              "which may not follow it"))
    return found


def stage_of(stages: Stages, rounds: Iterable[tuple[int, str | None]],
             completed: bool) -> str:
    """The task's stage: that of its latest round (`rounds`: seq and the step's stage), the
    initial one before any, the final one once it completed (if declared)."""
    if completed and stages.final:
        return stages.final
    latest = max(((seq, stage) for seq, stage in rounds if stage), default=None)
    return latest[1] if latest else stages.initial


def refusal(stages: Stages, now: str, step_id: str, stage: str,
            via: str | None = None) -> str | None:
    """Why starting `step_id` (of `stage`) in stage `now` (through `via`, a loop's) breaks
    the stages, or None."""
    if via is not None and stages.may(now, via) and stages.may(via, stage):
        return None
    if via is None and stages.may(now, stage):
        return None
    allowed: Mapping[str, list[str]] = stages.allowed
    if via is not None:
        return (f"Step '{step_id}' belongs to stage '{stage}': going back from '{now}' "
                f"through '{via}' is not allowed by the document.")
    return (f"Step '{step_id}' belongs to stage '{stage}', which may not follow '{now}' "
            f"(the document allows: {', '.join(allowed.get(now, [])) or 'nothing'}).")
