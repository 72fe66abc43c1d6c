"""Typed identifiers: every id is a UUID under a name that says what it points at.

The ids the control plane makes are `Id`s: UUIDs whose hash is C code. The hot path looks ids
up in dicts and sets a hundred times a step, and `uuid.UUID.__hash__` is a Python function
(`hash(self.int)`): one frame per lookup, about 190 of W2's calls a subtask before `Id`
(benchmarks/README.md). An `Id` equals, and hashes as, the plain UUID of the same value, so the
two mix freely as keys: a plain one (parsed by Pydantic, read by SQLAlchemy) costs only the
Python frame.
"""

from __future__ import annotations

import operator
import os
import time
import uuid
from typing import Any, NewType

from shoal.errors import NotFound

ID_PREFIX = r"^(?:[0-9a-fA-F]-?){1,32}$"
"""The start of an id as a query may give it: hex digits, dashes where the id has them or not."""

UserId = NewType("UserId", uuid.UUID)
TaskId = NewType("TaskId", uuid.UUID)
SubtaskId = NewType("SubtaskId", uuid.UUID)
AttemptId = NewType("AttemptId", uuid.UUID)
WorkerId = NewType("WorkerId", uuid.UUID)
TokenId = NewType("TokenId", uuid.UUID)


class Id(uuid.UUID):
    """A UUID whose hash runs no Python: `__hash__` is a property whose value is the bound C
    method `self.int.__hash__`, made once (Python looks a special method up on the type and
    calls what its descriptor gives; the result is `hash(self.int)`, as `uuid.UUID` hashes).
    Timed (`python -m timeit`), a dict lookup by an `Id` takes 0.106 µs against 0.120 µs by a
    plain UUID; the price is 72 bytes an id.

    `__str__` is made the same way: the text is formatted once, when the id is made, and
    `str(id)` calls that string's own C `__str__` (`uuid.UUID.__str__` is a Python function,
    and an event names each of its subtask's ids: 16 of W2's calls a subtask). The price is
    another 140 bytes an id."""

    __slots__ = ("_hash", "_str")
    __hash__ = property(operator.attrgetter("_hash"))
    __str__ = property(operator.attrgetter("_str"))

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        object.__setattr__(self, "_hash", self.int.__hash__)
        object.__setattr__(self, "_str", _text(self.int).__str__)

    def __reduce__(self) -> tuple[Any, ...]:
        return (id_of_int, (self.int,))


# The slots' setters: `uuid.UUID.__setattr__` refuses every assignment (ids are immutable).
_SET_INT, _SET_SAFE = vars(uuid.UUID)["int"].__set__, vars(uuid.UUID)["is_safe"].__set__
_SET_HASH = vars(Id)["_hash"].__set__
_SET_STR = vars(Id)["_str"].__set__
_UNKNOWN = uuid.SafeUUID.unknown  # read once: an enum member's lookup is a call each time
_VERSION_4 = ~(0xC000 << 48) & ~(0xF000 << 64)  # uuid.UUID(version=4) clears these bits…
_VARIANT_4 = (0x8000 << 48) | (4 << 76)  # … and sets these
# A version 7 id's 80 bits after its time: 74 random ones, the version (7) and the variant.
_RANDOM_7 = (1 << 80) - 1 & ~(0xF << 76) & ~(0x3 << 62)
_VARIANT_7 = (7 << 76) | (0x2 << 62)


def id_of_int(value: int) -> Id:
    """The `Id` whose 128 bits are `value`, made without `uuid.UUID.__init__`'s checks."""
    new = object.__new__(Id)
    _SET_INT(new, value)
    _SET_SAFE(new, _UNKNOWN)
    _SET_HASH(new, value.__hash__)
    hexed = f"{value:032x}"  # `_text`, inline: a call less for every id made
    _SET_STR(new, f"{hexed[:8]}-{hexed[8:12]}-{hexed[12:16]}-{hexed[16:20]}-{hexed[20:]}".__str__)
    return new


def _text(value: int) -> str:
    """The UUID `value` as `uuid.UUID.__str__` writes it."""
    hexed = f"{value:032x}"
    return f"{hexed[:8]}-{hexed[8:12]}-{hexed[12:16]}-{hexed[16:20]}-{hexed[20:]}"


def as_id(value: uuid.UUID) -> Id:
    """`value` as an `Id` (itself when it is one)."""
    return value if isinstance(value, Id) else id_of_int(value.int)


def new_id() -> Id:
    """A fresh random id (a version 4 UUID, as `uuid.uuid4()` makes): for what a person may
    name by the start of its id (a task, a checkpoint, a worker), where the first few digits
    of a random id tell it from the others (`shoal.cli.ids`)."""
    return id_of_int(int.from_bytes(os.urandom(16)) & _VERSION_4 | _VARIANT_4)


def new_ordered_id() -> Id:
    """A fresh id whose first 48 bits are the time in milliseconds, then 74 random bits (a
    version 7 UUID, RFC 9562): for the rows made in bulk (subtasks, attempts, files). A new
    row's key then goes in at the end of its table's indexes, on the same few pages as the
    rows made just before it, where a random key goes anywhere among the old ones: on a
    database that held 500 earlier tasks, a W1 commit wrote 150 pages to SQLite's log with
    random ids and 65 with these, as on a fresh database (ADR 0057). Two ids of the same
    millisecond are in no particular order.

    Such an id tells when it was made; its start does not tell it from the ids made about
    the same time, so what a person names by its start keeps `new_id`."""
    return id_of_int(time.time_ns() // 1_000_000 << 80
                     | int.from_bytes(os.urandom(10)) & _RANDOM_7 | _VARIANT_7)


def parse_id(value: str, *, kind: str = "id") -> uuid.UUID:
    """Parse a UUID from user input; a malformed one is simply not found."""
    try:
        return uuid.UUID(value)
    except (ValueError, AttributeError, TypeError) as exc:
        raise NotFound(f"No {kind} {value!r}.") from exc


def id_range(prefix: str) -> tuple[uuid.UUID, uuid.UUID]:
    """The lowest and the highest id that start with `prefix` (`ID_PREFIX`): a range the
    primary key's index answers, on every database."""
    digits = prefix.replace("-", "").lower()
    return uuid.UUID(digits.ljust(32, "0")), uuid.UUID(digits.ljust(32, "f"))
