"""The `agent` step's handler: a round is one run of the step's role, or, for a step that
`asks`, a conversation (`conversations`); its answer is checked against the role's contract."""

from __future__ import annotations

from dataclasses import replace

from shoal.engine import graph
from shoal.engine.model import StepOutput, SubtaskRecord
from shoal.engine.step import Step
from shoal.workflows.conversations import Conversations
from shoal.workflows.document import StepDoc
from shoal.workflows.runs import Reading, Round, Runs

NO_ANSWER = "(no answer: the question's deadline passed)"


class AgentStep:
    """Runs `agent` steps."""

    def __init__(self, runs: Runs) -> None:
        self.runs = runs
        self.conversations = Conversations(runs)

    def start(self, step: Step, doc_step: StepDoc, rnd: Round) -> None:
        if (opened := self.runs.opened(step, doc_step, rnd.via)) is None:
            return
        number, seq = opened
        if doc_step.asks is not None:
            self.conversations.turn(step, doc_step, number, 1, seq, rnd.deps, rnd.feedback)
        else:
            self.runs.one_run(step, doc_step, number, None, seq, deps=rnd.deps,
                              feedback=rnd.feedback)

    def read(self, step: Step, doc_step: StepDoc, sub: SubtaskRecord,
             output: StepOutput) -> Reading | None:
        """A question, when the step's role may still ask; else the answer, checked against
        the contract of the role that gave it (with what a step that learns learned)."""
        question = self.conversations.question(step, doc_step, sub, output.text)
        if question is not None:
            return Reading(replace(output, answers=True, parsed=question))
        checked = self.runs.answer_checked(step, sub, output)
        if checked is None:
            return None
        return Reading(self.conversations.kept(step, doc_step, sub, checked))

    def completed(self, step: Step, doc_step: StepDoc, sub: SubtaskRecord,
                  reading: Reading) -> bool:
        """A conversation goes on after a question asked, or answered."""
        return doc_step.asks is not None and self.conversations.next_turn(step, doc_step, sub)

    def failed(self, step: Step, doc_step: StepDoc, sub: SubtaskRecord, why: str) -> bool:
        return False

    def decided(self, step: Step, doc_step: StepDoc, sub: SubtaskRecord,
                answer: str | None) -> None:
        """A person answered a conversation's question: it goes back to the step's role."""
        if doc_step.asks is None:
            self.runs.person_answered(step, doc_step, sub, answer or "")
            return
        sub = graph.complete(step, sub, StepOutput(text=answer or NO_ANSWER))
        self.conversations.next_turn(step, doc_step, sub)
