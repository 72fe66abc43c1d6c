"""The record of what a conversation learned, folded from its role's reports: which reports
are taken, and how a later answer corrects an earlier one."""

from __future__ import annotations

from typing import Any

from shoal.workflows.facts import Fact, FactKind
from shoal.workflows.learning import EMPTY, Told, first_to_ask, record_in, reported

LEARN = {"program": Fact(description="the program"),
         "timeline": Fact(description="the time available"),
         "constraints": Fact(description="what limits the work", kind=FactKind.LIST),
         "budget": Fact(description="the money available", required=False)}


def said(**facts: tuple[Any, Any]) -> dict[str, Any]:
    return {"known": {n: {"value": v, "from": f} for n, (v, f) in facts.items()}}


def test_reports_of_undeclared_facts_unknown_sources_or_no_value_are_left_out() -> None:
    """Only a declared fact, from the request or an answer already given, with a value."""
    record = reported(EMPTY, said(program=("MSc", 3), timeline=(True, 1), visa=("yes", 1),
                                  budget=("", 1), constraints=(["a permit", 7], "2")), LEARN, 2)
    assert record.told == {"constraints": Told(("a permit", "7"), 2)}


def test_a_later_answer_replaces_a_fact_and_an_older_one_does_not() -> None:
    """'3 years, not 6 months' in answer 2 replaces answer 1's; answer 1 again changes nothing."""
    first = reported(EMPTY, said(timeline=("6 months", 1)), LEARN, 1)
    corrected = reported(first, said(timeline=("3 years", 2)), LEARN, 2)
    again = reported(corrected, said(timeline=("6 months", 1)), LEARN, 3)
    assert again.told["timeline"] == Told("3 years", 2)


def test_not_knowing_is_recorded_and_a_later_answer_may_still_tell_it() -> None:
    """An "I don't know" closes the fact (missing, not to be asked); a later value opens it."""
    record = reported(EMPTY, {"unknown": {"budget": {"from": 1}}}, LEARN, 1)
    assert (record.open(LEARN), record.missing(LEARN)) == (
        ["program", "timeline", "constraints"], ["program", "timeline", "constraints", "budget"])
    told = reported(record, said(budget=("€5,000", 2)), LEARN, 2)
    assert told.told["budget"] == Told("€5,000", 2)


def test_the_record_survives_its_wire_form() -> None:
    """What a round's answer holds under `facts` reads back as the same record."""
    record = reported(EMPTY, said(program=("MSc", "request"), constraints=(["a", "b"], 1))
                      | {"unknown": {"budget": {"from": 1}}}, LEARN, 1)
    assert record_in({"facts": record.wire(LEARN)}) == record


def test_the_engine_asks_first_what_the_role_named_then_the_first_required_fact() -> None:
    """Never a fact a question was about already, never an optional one unnamed."""
    record = reported(EMPTY, said(program=("MSc", 1)), LEARN, 1)
    assert first_to_ask(LEARN, record, asked=["program"], named=["budget"]) == "budget"
    assert first_to_ask(LEARN, record, asked=["timeline"]) == "constraints"
    assert first_to_ask(LEARN, record, asked=["timeline", "constraints"]) is None
