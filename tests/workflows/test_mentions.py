"""Whether an answer states a fact as told (`requires_facts`): normalised text, whole words, or
every number and content word of the fact."""

from __future__ import annotations

import pytest

from shoal.workflows.learning import Told
from shoal.workflows.mentions import left_out, normalised, states


@pytest.mark.parametrize(("text", "value"), [
    ("A budget of €5,000 for sensors.", "€5,000"),
    ("A budget of € 5.000 for sensors.", "€5,000 budget"),
    ("\uff21 \uff30\uff45\uff52\uff2d\uff29\uff34 from the Water Authority\u2019s office",
     "a permit from the water authority"),  # fullwidth letters, a typographic apostrophe
    ("The water authority's permit is needed to sample.", "need a permit from the water "
                                                          "authority to sample"),
    ("Timeline: 3 years.", "3 years"),
])
def test_a_fact_stated_in_other_case_spacing_or_order_is_stated(text: str, value: str) -> None:
    """Case, Unicode width, thousands separators, punctuation and word order do not matter."""
    assert states(normalised(text), value)


@pytest.mark.parametrize(("text", "value"), [
    ("A budget of €500.", "€5,000"),
    ("Timeline: 30 years.", "3 years"),
    ("A permit from the city.", "a permit from the water authority"),
    ("Field of study: budget", "urban climate"),
])
def test_a_fact_not_stated_is_found_missing(text: str, value: str) -> None:
    """A different number, or a content word left out, is not the fact."""
    assert not states(normalised(text), value)


def test_left_out_names_each_fact_and_item_the_text_does_not_state() -> None:
    """A list fact is stated only when every item is."""
    known = {"constraints": Told(("no travel budget", "a permit for the park"), 2),
             "timeline": Told("6 months", 0), "field": Told("urban climate", 1)}
    assert left_out("Urban climate, over 6 months, with no travel budget.", known) == {
        "constraints": ["a permit for the park"]}
