"""The `map` step's handler: a round is one run per item of an earlier entry's list (`over:
plan.sub_questions`, each prompt naming its `{item}`), run in parallel; its entry is the list of
their answers, in item order, once every item is done."""

from __future__ import annotations

import json

from shoal.engine import graph
from shoal.engine.model import StepOutput, SubtaskRecord
from shoal.engine.step import Step
from shoal.events import EventType
from shoal.workflows.board import MAX_ENTRY_CHARS
from shoal.workflows.document import StepDoc
from shoal.workflows.runs import Reading, Round, Runs

MAX_ITEMS = 50  # the most subtasks one map step fans out to


class MapStep:
    """Runs `map` steps."""

    def __init__(self, runs: Runs) -> None:
        self.runs = runs

    def start(self, step: Step, doc_step: StepDoc, rnd: Round) -> None:
        if (opened := self.runs.opened(step, doc_step, rnd.via)) is None:
            return
        number, seq = opened
        assert doc_step.over is not None  # the document check says so
        entry, _, path = doc_step.over.partition(".")
        items = self.runs.board.value(step, entry, path)
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
            self.runs.one_run(step, doc_step, number, i, seq, deps=rnd.deps,
                              feedback=rnd.feedback, item=text[:MAX_ENTRY_CHARS])

    def read(self, step: Step, doc_step: StepDoc, sub: SubtaskRecord,
             output: StepOutput) -> Reading | None:
        checked = self.runs.answer_checked(step, sub, output)
        return None if checked is None else Reading(checked)

    def completed(self, step: Step, doc_step: StepDoc, sub: SubtaskRecord,
                  reading: Reading) -> bool:
        return False

    def failed(self, step: Step, doc_step: StepDoc, sub: SubtaskRecord, why: str) -> bool:
        return False

    def decided(self, step: Step, doc_step: StepDoc, sub: SubtaskRecord,
                answer: str | None) -> None:
        self.runs.person_answered(step, doc_step, sub, answer or "")
