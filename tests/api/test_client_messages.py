"""Properties of the client socket's messages: any frame is a typed message or a `BadMessage`
naming the field at fault — never an exception that would drop the socket."""

from __future__ import annotations

import json
import math
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.api.client_ws import BadMessage, ClientMessage, Subscribe, _parse
from shoal.limits import MAX_INT64, text_problem

texts = st.lists(st.one_of(st.characters(exclude_categories=["Cs"]),
                           st.sampled_from(["\x00", "\ud800"])),
                 max_size=30).map("".join)


def _outcome(frame: str) -> tuple[ClientMessage | None, BadMessage | None]:
    """The typed message, or the refusal; any other exception propagates (and fails)."""
    try:
        return _parse(frame), None
    except BadMessage as refused:
        return None, refused


@settings(max_examples=300, deadline=None)
@given(since=st.one_of(st.integers(), st.floats(), texts, st.none()))
def test_since_is_taken_only_as_a_storable_sequence_number(since: object) -> None:
    """A number is accepted exactly when it is a whole number from 0 to 2^63 - 1; text only
    when it reads as one."""
    frame = json.dumps({"type": "subscribe", "since": since})
    if isinstance(since, str):
        msg, refused = _outcome(frame)
        if refused is not None:
            assert refused.field == "since"
        else:
            assert isinstance(msg, Subscribe)
            assert msg.since is not None
            assert 0 <= msg.since <= MAX_INT64
        return
    whole = isinstance(since, int) or (isinstance(since, float) and math.isfinite(since)
                                       and since.is_integer())
    number = int(since) if whole else None  # type: ignore[call-overload]
    if since is None or (number is not None and 0 <= number <= MAX_INT64):
        msg = _parse(frame)
        assert isinstance(msg, Subscribe)
        assert msg.since == number
        return
    with pytest.raises(BadMessage) as refused:
        _parse(frame)
    assert refused.value.field == "since"


@settings(max_examples=300, deadline=None)
@given(task_id=texts, kinds=st.lists(texts, max_size=3))
def test_subscribe_text_is_typed_or_refused_by_field(task_id: str, kinds: list[str]) -> None:
    """A task id and event types are taken when they are a UUID and storable text, and
    otherwise refused naming the field."""
    frame = json.dumps({"type": "subscribe", "data": {"task_id": task_id, "event_types": kinds}})
    msg, refused = _outcome(frame)
    if refused is not None:
        assert refused.field is not None
        assert refused.field.split(".")[0] in {"task_id", "event_types"}
        return
    assert isinstance(msg, Subscribe)
    assert msg.task_id == uuid.UUID(task_id)
    assert all(text_problem(k) is None and len(k) <= 64 for k in kinds)


@settings(max_examples=200, deadline=None)
@given(raw=st.one_of(texts, st.binary().map(lambda b: b.decode("latin-1"))))
def test_any_frame_is_a_message_or_a_bad_message(raw: str) -> None:
    """Arbitrary frames never raise anything but `BadMessage`."""
    _, refused = _outcome(raw)
    assert refused is None or refused.message
