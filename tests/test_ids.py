"""`Id`: a UUID that equals and hashes as the plain UUID of the same value, hashed in C."""

from __future__ import annotations

import copy
import pickle
import sys
import uuid
from collections.abc import Callable
from types import CodeType, FrameType, SimpleNamespace
from typing import Any

import pytest

from shoal import ids as ids_module
from shoal.ids import Id, as_id, id_of_int, new_id, new_ordered_id


def test_an_id_is_the_uuid_of_its_value() -> None:
    """Equal both ways, the same hash, text, bytes and order: the two mix as keys."""
    for _ in range(200):
        made = new_id()
        plain = uuid.UUID(str(made))
        assert made == plain
        assert plain == made
        assert hash(made) == hash(plain)
        assert {plain: 1}[made] == 1
        assert {made: 2}[plain] == 2
        assert (made.hex, made.bytes, made.version, made.variant) == (
            plain.hex, plain.bytes, 4, uuid.RFC_4122)
        assert (str(made), f"{made}", repr(made)) == (
            str(plain), f"{plain}", repr(plain).replace("UUID", "Id"))
        assert made != new_id()
    low, high = Id(int=1), uuid.UUID(int=2)
    assert low < high
    assert sorted([high, low]) == [low, high]
    assert Id("12345678-1234-5678-1234-567812345678") == uuid.UUID(
        "12345678123456781234567812345678")


def test_an_id_survives_copies_and_pickles_and_stays_immutable() -> None:
    made = new_id()
    for other in (copy.copy(made), copy.deepcopy(made), pickle.loads(pickle.dumps(made))):
        assert isinstance(other, Id)
        assert other == made
        assert str(other) == str(made)
        assert hash(other) == hash(made)
    with pytest.raises(TypeError, match="immutable"):
        made.int = 5  # type: ignore[misc]
    assert as_id(made) is made
    plain = uuid.uuid4()
    assert isinstance(as_id(plain), Id)
    assert as_id(plain) == plain
    assert id_of_int(plain.int) == plain


def python_calls(action: Callable[[], object]) -> list[str]:
    """The Python functions `action` calls, by name, in order (C functions are not counted,
    nor `action` itself and the comprehensions written in it)."""
    calls: list[str] = []
    own = {action.__code__, *(c for c in action.__code__.co_consts if isinstance(c, CodeType))}

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code not in own:
            calls.append(frame.f_code.co_name)

    sys.setprofile(profile)
    try:
        action()
    finally:
        sys.setprofile(None)
    return calls


def test_hashing_an_id_runs_no_python_function() -> None:
    """The point of `Id`: a dict lookup by one is no Python frame (a plain UUID's is one)."""
    made, plain = new_id(), uuid.uuid4()
    table = {made: 1, plain: 2}
    assert python_calls(lambda: (table[made], hash(made))) == []
    assert python_calls(lambda: table[plain]) == ["__hash__"]


def test_an_ids_text_runs_no_python_function() -> None:
    """An event names its subtask's ids as text: `str` of an `Id` is no Python frame either,
    whichever way the id was made (a plain UUID's is one)."""
    plain = uuid.uuid4()
    ids = [new_id(), Id(str(plain)), Id(int=plain.int), id_of_int(plain.int), as_id(plain)]
    assert [str(made) for made in ids[1:]] == [str(plain)] * 4
    assert python_calls(lambda: [(str(made), f"{made}") for made in ids]) == []
    assert python_calls(lambda: str(plain)) == ["__str__"]


def test_an_ordered_id_begins_with_its_millisecond(monkeypatch: pytest.MonkeyPatch) -> None:
    """A version 7 UUID: its first 48 bits the time in milliseconds, the rest random but for
    the version and the variant, so ids of later milliseconds sort after earlier ones (a new
    row's key goes in at the end of an index) and ids of one millisecond still differ."""
    clock = [1_796_000_000_123_456_789]  # nanoseconds
    monkeypatch.setattr(ids_module, "time", SimpleNamespace(time_ns=lambda: clock[0]))
    same = [new_ordered_id() for _ in range(500)]
    assert len(set(same)) == 500
    for made in same:
        assert isinstance(made, Id)
        plain = uuid.UUID(str(made))
        assert (made, hash(made), made.version, made.variant) == (
            plain, hash(plain), 7, uuid.RFC_4122)
        assert made.int >> 80 == 1_796_000_000_123
    # Each of the 74 other bits is set in some id and clear in another: they are random.
    free = ~((1 << 128) - 1 << 80 | 0xF << 76 | 0x3 << 62) & ((1 << 128) - 1)
    assert sum(1 << b for b in range(128)
               if any(m.int >> b & 1 for m in same) and not all(m.int >> b & 1 for m in same)
               ) == free
    clock[0] += 1_000_000  # a millisecond later
    later = [new_ordered_id() for _ in range(50)]
    assert min(later) > max(same)
    assert min(str(m) for m in later) > max(str(m) for m in same)  # as text too (SQLite)
    assert sorted(same + later)[500:] == sorted(later)


def test_a_random_id_is_random_from_its_first_digit() -> None:
    """What a person names by a start of its id (a task, a checkpoint) keeps a random id: a
    few digits tell apart ids made in the same moment, which ordered ids' starts do not."""
    made = [new_id() for _ in range(200)]
    assert len({str(m)[:6] for m in made}) > 190
    assert all(m.version == 4 for m in made)
