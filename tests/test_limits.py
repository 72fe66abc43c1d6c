"""What the store can hold: `value_problem` finds the first unstorable value, wherever it is."""

from __future__ import annotations

import math
from enum import StrEnum

from shoal.limits import value_problem


class Colour(StrEnum):
    RED = "red\x00"


def test_value_problem_finds_unstorable_values_of_every_kind() -> None:
    """Plain text, numbers and None pass; NUL, a lone surrogate (in text, a str subclass, a
    key, a nested list) and a non-finite number are named with where they are."""
    for fine in ("", "plain", "héllo ✓", 0, 2**70, True, None, 1.5, [], {}, ["a", {"b": 1}]):
        assert value_problem(fine) is None
    assert value_problem("a\x00b") == ("", "contains a NUL character (\\u0000), which cannot be "
                                           "stored")
    assert value_problem("x\ud800")[1].startswith("contains a lone surrogate")  # type: ignore[index]
    assert value_problem(Colour.RED) is not None
    assert value_problem({"k": ["ok", "bad\x00"]})[0] == "k.1"  # type: ignore[index]
    assert value_problem({"bad\x00": 1})[1].startswith("has a key that")  # type: ignore[index]
    assert value_problem({1: ("x", "y\x00")})[0] == "1.1"  # type: ignore[index]
    assert value_problem([math.inf])[0] == "0"  # type: ignore[index]
    assert value_problem({"delay": 0.0, "ratio": [1.5, -2.25]}) is None
    for bad in (math.nan, math.inf, -math.inf):
        assert value_problem({"a": [1.5, {"b": bad}]})[0] == "a.1.b"  # type: ignore[index]
