"""Batched frames of the worker protocol (ADR 0024): grouping, limits, and that each frame
parses as the message it claims to be."""

from __future__ import annotations

import uuid

import pytest
from pydantic import ValidationError

from shoal import protocol
from shoal.protocol import (
    ExecuteTask,
    ExecuteTasks,
    TaskResult,
    TaskResults,
    frames,
    parse_server_message,
    parse_worker_message,
)


def _result(output: str = "ok") -> TaskResult:
    return TaskResult(attempt_id=uuid.uuid4(), fence=1, status="succeeded", output=output)


def _execute(name: str) -> ExecuteTask:
    return ExecuteTask(attempt_id=uuid.uuid4(), fence=1, task_id=uuid.uuid4(),
                       subtask_id=uuid.uuid4(), role="coder", tool="echo", name=name,
                       instructions=f"do {name}")


def test_results_of_one_moment_share_one_frame() -> None:
    results = [_result(f"out {i}") for i in range(3)]
    texts = [r.model_dump_json() for r in results]
    [(frame, members)] = frames(texts, "task_results", "results")
    assert members == [0, 1, 2]
    parsed = parse_worker_message(frame)
    assert isinstance(parsed, TaskResults)
    assert parsed.results == results


def test_attempts_of_one_commit_share_one_frame() -> None:
    runs = [_execute("a"), _execute("b")]
    [(frame, members)] = frames([r.model_dump_json() for r in runs], "execute_tasks", "tasks")
    assert members == [0, 1]
    parsed = parse_server_message(frame)
    assert isinstance(parsed, ExecuteTasks)
    assert parsed.tasks == runs


def test_a_frame_of_one_is_the_single_message_unchanged() -> None:
    text = _result().model_dump_json()
    assert frames([text], "task_results", "results") == [(text, [0])]
    assert frames([], "task_results", "results") == []


def test_frames_stay_within_the_size_limit() -> None:
    """A text that would take its frame past the limit starts the next one; a text larger
    than the limit travels alone; the order never changes."""
    small = [_result("s" * 50).model_dump_json() for _ in range(4)]  # about 310 bytes each
    big = _result("b" * 800).model_dump_json()
    texts = [small[0], small[1], small[2], big, small[3]]
    grouped = frames(texts, "task_results", "results", limit=700)
    assert [members for _, members in grouped] == [[0, 1], [2], [3], [4]]
    assert grouped[2][0] == big
    assert grouped[3][0] == small[3]
    for frame, members in grouped:
        assert len(frame.encode()) <= 700 or len(members) == 1
        parsed = parse_worker_message(frame)
        got = parsed.results if isinstance(parsed, TaskResults) else [parsed]
        assert [r.model_dump_json() for r in got] == [texts[i] for i in members]


def test_the_size_limit_counts_utf8_bytes() -> None:
    """Text beyond ASCII counts as the bytes it takes on the wire, not as characters."""
    wide = [_result("é" * 100).model_dump_json() for _ in range(2)]  # 363 chars, 463 bytes
    assert all(len(t) < 400 < len(t.encode()) for t in wide)
    # Together: under 850 counted in characters, over it counted in bytes.
    assert [m for _, m in frames(wide, "task_results", "results", limit=850)] == [[0], [1]]
    assert [m for _, m in frames(wide, "task_results", "results", limit=1000)] == [[0, 1]]


def test_frames_stay_within_the_count_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(protocol, "MAX_BATCH", 2)
    texts = [_result().model_dump_json() for _ in range(5)]
    assert [m for _, m in frames(texts, "task_results", "results")] == [[0, 1], [2, 3], [4]]


def test_a_batch_must_hold_something_and_not_too_much() -> None:
    with pytest.raises(ValidationError):
        parse_worker_message('{"v":1,"type":"task_results","results":[]}')
    many = ",".join(_result().model_dump_json() for _ in range(protocol.MAX_BATCH + 1))
    with pytest.raises(ValidationError):
        parse_worker_message(f'{{"v":1,"type":"task_results","results":[{many}]}}')


def _execute_fields(**extra: object) -> dict[str, object]:
    upstream = [protocol.UpstreamResult(
        subtask_id=uuid.uuid4(), name="before", output="é ünïcode \"quoted\"\n",
        files=[protocol.FilePayload(path="a.txt", content_b64="aGk=")])]
    return {"attempt_id": uuid.uuid4(), "fence": 3, "task_id": uuid.uuid4(),
            "subtask_id": uuid.uuid4(), "role": "coder", "tool": "echo", "name": "s",
            "instructions": "do it", "upstream": upstream, "timeout": 900.0,
            "options": {"privacy_level": "standard", "delay": 0.5, "nested": {"k": [1, None]}},
            "mcp_servers": [], "output_file": None, "traceparent": None, "budget": None,
            **extra}


@pytest.mark.parametrize("extra", [
    {}, {"traceparent": "00-" + "a" * 32 + "-" + "b" * 16 + "-01"}, {"upstream": []},
    {"output_file": "answer.md"}, {"budget": protocol.BudgetLeft(tokens=5, cost_usd=None)},
    {"mcp_servers": [protocol.McpServer(name="files", command="shoal", args=["mcp"])]},
], ids=["plain", "traced", "no-upstream", "output-file", "budget", "mcp"])
def test_the_execute_frame_is_the_models_text(extra: dict[str, object]) -> None:
    """The `execute_task` frame serialized straight from its fields is the text the model
    gives, byte for byte, and parses back to it."""
    fields = _execute_fields(**extra)
    text = protocol.execute_task_json(**fields)
    assert text == ExecuteTask(**fields).model_dump_json()  # type: ignore[arg-type]
    assert parse_server_message(text) == ExecuteTask(**fields)  # type: ignore[arg-type]


def test_the_acks_frame_is_the_models_text() -> None:
    """The `acks` frame serialized straight from (attempt, accepted, reason) is the text the
    model gives, byte for byte."""
    acks = [(uuid.uuid4(), True, None), (uuid.uuid4(), False, "lost its lease")]
    model = protocol.Acks(acks=[protocol.Ack(attempt_id=a, accepted=ok, reason=why)
                                for a, ok, why in acks])
    assert protocol.acks_json(acks) == model.model_dump_json()
