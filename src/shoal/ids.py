"""Typed identifiers: every id is a UUID under a name that says what it points at."""

from __future__ import annotations

import uuid
from typing import NewType

from shoal.errors import NotFound

ID_PREFIX = r"^(?:[0-9a-fA-F]-?){1,32}$"
"""The start of an id as a query may give it: hex digits, dashes where the id has them or not."""

UserId = NewType("UserId", uuid.UUID)
TaskId = NewType("TaskId", uuid.UUID)
SubtaskId = NewType("SubtaskId", uuid.UUID)
AttemptId = NewType("AttemptId", uuid.UUID)
WorkerId = NewType("WorkerId", uuid.UUID)
TokenId = NewType("TokenId", uuid.UUID)


def new_id() -> uuid.UUID:
    """A fresh random id."""
    return uuid.uuid4()


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
