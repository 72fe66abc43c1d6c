"""A step that asks and learns (`asks.learn`), run by the engine with no I/O and scripted role
answers that no demo script wrote: the engine keeps what is known and from which answer, passes
on only questions about facts still to learn, asks for a missing fact itself, takes a later
answer's correction and an "I don't know", and a later step must state every known fact
(`requires_facts`); and what the document check refuses, with the line."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from shoal.engine.inputs import CheckpointDecision
from shoal.engine.model import StepKind
from shoal.events import EventType
from shoal.states import TaskStatus
from shoal.workflows.blackboard import blackboard
from shoal.workflows.loading import DocumentError, load_document
from tests.workflows.test_document import refusal
from tests.workflows.test_interpreter import Run

TRIP = """\
name: trip
version: 1
description: An intake conversation, then a plan that states what it learned.
parameters:
  max_questions: {type: integer, default: 4, minimum: 0, maximum: 10}
roles:
  asker:
    prompt: |
      Learn about the trip.
      Request: {query}
    output:
      type: object
      required: [destination]
      properties:
        destination: {type: string}
        duration: {type: string}
        needs: {type: array, items: {type: string}}
        budget: {type: string}
  planner:
    prompt: |
      Write the plan.
      {context}
steps:
  - id: intake
    kind: agent
    role: asker
    asks:
      max: "{max_questions}"
      learn:
        destination: {description: where the trip goes}
        duration: {description: how long the trip lasts, question: "How long is the trip?"}
        needs: {description: "what the traveller needs (visas, vaccinations)", kind: list}
        budget: {description: the money available, required: false}
  - {id: plan, kind: agent, role: planner, after: [intake], requires_facts: {from: intake}}
"""
NEEDS_QUESTION = ("Could you tell me what the traveller needs (visas, vaccinations)? "
                  "(If you do not know, say so.)")


class Trip(Run):
    """One task of the trip document, its request `request`."""

    def __init__(self, request: str = "Plan a trip for me.", **parameters: object) -> None:
        super().__init__(TRIP, request=request, **parameters)

    def turn(self, key: str, **said: Any) -> None:
        self.answer(key, json.dumps(said))

    def questions(self) -> list[str]:
        return [str(d["question"]) for t, d in self.events if t is EventType.CHECKPOINT_READY]

    def reply(self, text: str) -> None:
        cp = [d for t, d in self.events if t is EventType.CHECKPOINT_READY][-1]
        self.decide(CheckpointDecision(uuid.UUID(str(cp["checkpoint_id"])), "answer", None,
                                       answer=text))

    def notices(self) -> list[str]:
        return [str(d["message"]) for t, d in self.events if t is EventType.NOTICE]

    def intake(self) -> Any:
        return blackboard(self.flow.doc, self.state.subtasks.values())["intake"][-1]["value"]


def known(**facts: tuple[Any, int | str]) -> dict[str, Any]:
    return {name: {"value": value, "from": source} for name, (value, source) in facts.items()}


def test_a_question_about_a_known_fact_is_not_passed_on_the_engine_asks_a_missing_one() -> None:
    run = Trip()
    run.turn("intake#1.1", ask="Where are you going?", about=["destination"])
    run.reply("Lisbon, for two weeks.")
    run.turn("intake#1.3", ask="Which city was it again?", about=["destination"],
             known=known(destination=("Lisbon", 1), duration=("two weeks", 1)))
    assert run.questions() == ["Where are you going?", NEEDS_QUESTION]
    assert "Which city was it again?" not in json.dumps(
        [s.description for s in run.state.subtasks.values() if s.kind is StepKind.HUMAN])
    assert any("about destination, which the user already told" in n and
               "Shoal asked for 'needs' instead" in n for n in run.notices())
    run.reply("A visa and a yellow fever shot.")
    prompt = run.queued()[0].description
    assert "You asked the user (about needs): Could you tell me" in prompt
    assert "The user answered (answer 2): A visa and a yellow fever shot." in prompt
    assert '- destination: "Lisbon" (answer 1)' in prompt
    assert "Still to learn: needs, budget" in prompt
    run.turn("intake#1.5", destination="Lisbon", known=known(
        needs=(["a visa", "a yellow fever shot"], 2)))
    value = run.intake()
    assert (value["destination"], value["duration"], value["needs"]) == (
        "Lisbon", "two weeks", ["a visa", "a yellow fever shot"])
    assert value["facts"]["known"]["needs"] == {"value": ["a visa", "a yellow fever shot"],
                                                "from": 2}
    assert value["facts"]["missing"] == ["budget"]
    assert "known" not in value  # the turn's report became the record
    assert run.keys() == ["plan#1"]


def test_a_question_that_names_no_fact_is_not_passed_on() -> None:
    run = Trip(max_questions=2)
    run.turn("intake#1.1", ask="Tell me everything!")  # no `about`
    assert run.questions() == ["Could you tell me where the trip goes? (If you do not know, "
                               "say so.)"]
    assert any("without naming a fact still to learn" in n for n in run.notices())


def test_with_nothing_left_to_ask_a_question_about_a_known_fact_makes_the_role_answer() -> None:
    run = Trip("Two weeks in Lisbon; I need a visa; I have no idea about money.")
    everything = known(destination=("Lisbon", "request"), duration=("Two weeks", "request"),
                       needs=(["a visa"], "request"))
    run.turn("intake#1.1", ask="How long again?", about=["duration"], known=everything,
             unknown={"budget": {"from": "request"}})
    assert run.questions() == []  # nothing passed on, nothing left for Shoal to ask
    [again] = run.queued()
    assert (again.key, bool(again.options.repair)) == ("intake#1.1", True)
    run.turn("intake#1.1", destination="Lisbon", known=everything,
             unknown={"budget": {"from": "request"}})
    value = run.intake()
    assert value["facts"]["unknown"] == {"budget": {"from": "request"}}
    assert value["facts"]["missing"] == ["budget"]


def test_an_answer_while_a_required_fact_is_missing_makes_the_engine_ask_for_it() -> None:
    run = Trip("A trip to Porto.")
    run.turn("intake#1.1", destination="Porto", known=known(destination=("Porto", "request")))
    assert run.questions() == ["How long is the trip? (If you do not know, say so.)"]
    assert any("answered while 'duration' was still to learn" in n for n in run.notices())
    run.reply("I don't know yet.")
    run.turn("intake#1.3", destination="Porto", unknown={"duration": {"from": 1}})
    assert run.questions()[-1] == NEEDS_QUESTION  # duration is not asked again
    run.reply("Nothing special.")
    run.turn("intake#1.5", destination="Porto", known=known(needs=(["nothing special"], 2)))
    value = run.intake()
    assert value["facts"]["unknown"] == {"duration": {"from": 1}}
    assert value["facts"]["missing"] == ["duration", "budget"]
    assert "duration" not in value  # never told: the role wrote none, Shoal invents none


def test_a_later_answer_corrects_an_earlier_one_and_an_older_report_does_not_undo_it() -> None:
    run = Trip("Lisbon for 6 months.", max_questions=3)
    run.turn("intake#1.1", ask="What do you need there?", about=["needs"],
             known=known(destination=("Lisbon", "request"), duration=("6 months", "request")))
    run.reply("A visa. And it's 3 years, not 6 months.")
    run.turn("intake#1.3", ask="Your budget?", about=["budget"],
             known=known(needs=(["a visa"], 1), duration=("3 years", 1)))
    run.reply("€5,000")
    run.turn("intake#1.5", destination="Lisbon", known=known(
        duration=("6 months", "request"),  # older than the correction: not taken
        budget=("€5,000", 2), visa=("yes", 2),  # not a fact it learns: not taken
        destination=("Paris", 7)))  # no answer 7: not taken
    facts = run.intake()["facts"]["known"]
    assert facts["duration"] == {"value": "3 years", "from": 1}
    assert facts["destination"] == {"value": "Lisbon", "from": "request"}
    assert facts["budget"] == {"value": "€5,000", "from": 2}
    assert "visa" not in facts
    assert run.questions() == ["What do you need there?", "Your budget?"]


def test_a_step_that_asks_another_role_learns_from_its_answers_too() -> None:
    text = TRIP.replace("  planner:\n", "  guide:\n    prompt: \"Answer: {item}\"\n  planner:\n") \
        .replace('      max: "{max_questions}"\n', '      role: guide\n      max: 2\n')
    run = Run(text, request="Plan a trip.")
    run.answer("intake#1.1", json.dumps({"ask": "Where should a first trip go?",
                                         "about": ["destination"]}))
    [guide] = run.queued()
    assert (guide.role, guide.description) == ("guide", "Answer: Where should a first trip go?")
    run.answer("intake#1.2", "Lisbon, for a week.")
    prompt = run.queued()[0].description
    assert "The guide agent answered (answer 1): Lisbon, for a week." in prompt
    assert "What you must learn from the guide agent" in prompt
    run.answer("intake#1.3", json.dumps({"destination": "Lisbon", "known": known(
        destination=("Lisbon", 1), duration=("a week", 1), needs=(["nothing"], 1))}))
    assert run.keys() == ["plan#1"]
    assert blackboard(run.flow.doc, run.state.subtasks.values())["intake"][-1]["value"][
        "facts"]["known"]["duration"] == {"value": "a week", "from": 1}


def finished_intake() -> Trip:
    run = Trip("Two weeks in Lisbon.", max_questions=1)
    run.turn("intake#1.1", ask="What do you need, and your budget?", about=["needs", "budget"],
             known=known(destination=("Lisbon", "request"), duration=("two weeks", "request")))
    run.reply("A visa; I have €5,000 for it.")
    run.turn("intake#1.3", destination="Lisbon",
             known=known(needs=(["a visa"], 1), budget=("€5,000", 1)))
    return run


def test_a_step_that_requires_the_facts_is_told_them_and_sent_back_once_without_them() -> None:
    run = finished_intake()
    [plan] = run.queued()
    assert "What 'intake' was told: state each fact where it belongs" in plan.description
    assert '- budget: "€5,000"' in plan.description
    run.answer("plan#1", "Two weeks in Lisbon. Get a visa.")
    [again] = run.queued()
    assert again.key == "plan#1"
    told = run.flow.instructions(run.state.task, again, ())
    assert 'Your previous answer left out facts the user told' in told
    assert 'budget: "€5,000"' in told
    run.answer("plan#1", "Two weeks in Lisbon. Get a visa. Spend less than you have.")
    assert run.state.task.status is TaskStatus.COMPLETED  # kept, with a notice
    assert any("leaves out what the user told: budget" in n for n in run.notices())


def test_an_answer_that_states_every_fact_is_taken_at_once() -> None:
    run = finished_intake()
    run.answer("plan#1", "# Lisbon, 2 weeks\n\nTWO WEEKS in Lisbon; a budget of €5 000? "
                         "No: €5.000. Apply for a visa first.")
    assert run.state.task.status is TaskStatus.COMPLETED
    assert not [n for n in run.notices() if "leaves out" in n]


def _broken(old: str, new: str) -> str:
    assert old in TRIP, old
    return TRIP.replace(old, new)


@pytest.mark.parametrize(("old", "new", "at", "field", "problem"), [
    ("        budget: {type: string}\n", "", "budget: {description", "steps.0.asks.learn.budget",
     "the contract of role 'asker' has no property 'budget'"),
    ("needs: {type: array,", "needs: {type: string,", "needs: {description",
     "steps.0.asks.learn.needs", "the contract's property 'needs' must accept an array"),
    ("        budget: {type: string}\n", "        budget: {type: string}\n"
     "        facts: {type: object}\n", "facts: {type", "roles.asker.output.properties.facts",
     "the engine writes 'facts' in its role's answer"),
    ("      required: [destination]\n", "      required: [destination]\n"
     "      additionalProperties: false\n", "additionalProperties",
     "roles.asker.output.additionalProperties", "may not forbid additional properties"),
    ("requires_facts: {from: intake}", "requires_facts: {from: intake, facts: [visa]}",
     "requires_facts", "steps.1.requires_facts.facts.0", "'intake' learns no fact 'visa'"),
    ("requires_facts: {from: intake}", "requires_facts: {from: plan}", "requires_facts",
     "steps.1.requires_facts.from", "'plan' is not a step that learns facts"),
    ("after: [intake], requires_facts", "requires_facts", "requires_facts",
     "steps.1.requires_facts.from", "this step does not come after 'intake'"),
    ("        destination: {description: where the trip goes}\n",
     "        Destination: {description: where the trip goes}\n", "Destination:",
     "steps.0.asks.learn.Destination.[key]", "should match pattern"),
])
def test_the_check_refuses_what_a_step_could_not_learn_or_state(
        old: str, new: str, at: str, field: str, problem: str) -> None:
    details, line = refusal(_broken(old, new), at, "trip.yaml")
    assert (details["field"], problem in details["problem"]) == (field, True), details
    assert details["line"] == line, details


def test_a_role_that_learns_needs_an_output_contract() -> None:
    text = TRIP.replace("    role: asker\n    asks:", "    role: planner\n    asks:")
    with pytest.raises(DocumentError) as caught:
        load_document(text, source="trip.yaml")
    assert caught.value.details["field"] == "steps.0.asks.learn"
    assert "role 'planner' needs an output contract" in caught.value.details["problem"]
