"""Properties of the worker protocol's edge: any text or number a worker sends is either taken
whole or refused with an error naming its field — never stored half, never a crash."""

from __future__ import annotations

import json
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from shoal.errors import UnstorableText
from shoal.limits import MAX_INT64, storable_text, text_problem
from shoal.protocol import MAX_TOKENS, AgentLog, TaskResult, WorkerRegister, parse_worker_message

# Any text, with NUL characters and lone surrogates mixed in often. (Only high surrogates: a
# high one followed by a low one would be a pair, which JSON reads as one valid character.)
texts = st.lists(st.one_of(st.characters(exclude_categories=["Cs"]),
                           st.sampled_from(["\x00", "\ud800"])),
                 max_size=40).map("".join)
ATTEMPT = str(uuid.uuid4())


def _send(message: dict[str, object]) -> str:
    """What a sender's JSON encoder puts on the wire (surrogates as `\\ud800` escapes)."""
    return json.dumps(message)


@settings(max_examples=300, deadline=None)
@given(text=texts)
def test_log_text_is_taken_whole_or_refused(text: str) -> None:
    """An `agent_log` line is taken exactly as sent if it can be stored; otherwise refused."""
    raw = _send({"type": "agent_log", "attempt_id": ATTEMPT, "message": text})
    if text_problem(text) is None:
        msg = parse_worker_message(raw)
        assert isinstance(msg, AgentLog)
        assert msg.message == text
        return
    with pytest.raises((UnstorableText, ValidationError)) as refused:
        parse_worker_message(raw)
    if isinstance(refused.value, UnstorableText):
        assert refused.value.field == "message"


@settings(max_examples=200, deadline=None)
@given(key=texts, value=texts)
def test_nested_text_is_refused_naming_its_path(key: str, value: str) -> None:
    """Inside `system_info` a bad key or value is refused with the path to it."""
    raw = _send({"type": "worker_register", "machine_id": "m", "machine_name": "n",
                 "system_info": {"os": {key: [value]}}})
    if text_problem(key) is None and text_problem(value) is None:
        msg = parse_worker_message(raw)
        assert isinstance(msg, WorkerRegister)
        assert msg.system_info == {"os": {key: [value]}}
        return
    with pytest.raises((UnstorableText, ValidationError)) as refused:
        parse_worker_message(raw)
    if isinstance(refused.value, UnstorableText):
        assert refused.value.field.startswith("system_info.os")


@settings(max_examples=300, deadline=None)
@given(fence=st.integers(), tokens=st.integers(), cost=st.floats())
def test_result_numbers_are_taken_only_within_the_store(fence: int, tokens: int,
                                                        cost: float) -> None:
    """A result's fence, tokens and cost are accepted exactly when the store can hold them."""
    raw = json.dumps({"type": "task_result", "attempt_id": ATTEMPT, "fence": fence,
                      "status": "succeeded", "usage": {"input_tokens": tokens, "cost_usd": cost}})
    fits = 0 <= fence <= MAX_INT64 and 0 <= tokens <= MAX_TOKENS and 0 <= cost <= 1e9
    if fits:
        msg = parse_worker_message(raw)
        assert isinstance(msg, TaskResult)
        assert (msg.fence, msg.usage.input_tokens, msg.usage.cost_usd) == (fence, tokens, cost)
    else:
        with pytest.raises((ValidationError, UnstorableText)):
            parse_worker_message(raw)


@settings(max_examples=300, deadline=None)
@given(text=texts)
def test_storable_text_always_stores_and_keeps_good_text(text: str) -> None:
    """What a worker passes on from a tool is always storable, and unchanged if it was."""
    cleaned = storable_text(text)
    assert text_problem(cleaned) is None
    assert len(cleaned) == len(text)
    if text_problem(text) is None:
        assert cleaned == text
