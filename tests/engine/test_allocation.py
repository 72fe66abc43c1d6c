"""Tests for shoal.engine.allocation: hard constraints, scores and greedy placement."""

from __future__ import annotations

import time
import uuid

import pytest

from shoal.engine.allocation import (
    Assignment,
    SubtaskDemand,
    WorkerView,
    allocate,
    choose_tool,
    privacy_score,
    resource_score,
    score,
    unplaceable_reason,
)


def worker(
    tools: dict[str, bool] | None = None,
    *,
    slots: int = 2,
    running: int = 0,
    load: float = 0.0,
) -> WorkerView:
    """A worker with the given tools (name -> is_local) and an even load."""
    return WorkerView(
        worker_id=uuid.uuid4(),
        tools={"claude_code": False} if tools is None else tools,
        slots=slots,
        running=running,
        cpu_percent=load,
        memory_percent=load,
        disk_percent=load,
    )


def demand(
    *,
    priority: float = 1.0,
    pinned: str | None = None,
    recommended: str | None = None,
    preferences: tuple[str, ...] = (),
    sensitive: bool = False,
    exclude: frozenset[uuid.UUID] = frozenset(),
    default: str | None = None,
) -> SubtaskDemand:
    """A demand with only the given constraints."""
    return SubtaskDemand(
        subtask_id=uuid.uuid4(),
        priority=priority,
        pinned_tool=pinned,
        recommended_tool=recommended,
        tool_preferences=preferences,
        sensitive=sensitive,
        exclude_workers=exclude,
        default_tool=default,
    )


def test_free_slots_never_negative() -> None:
    """A worker running more than its slots has zero free slots."""
    assert worker(slots=2, running=3).free_slots == 0
    assert worker(slots=4, running=1).free_slots == 3


def test_pinned_tool_present_scores_one() -> None:
    """A pinned tool the worker offers is used with a full match."""
    w = worker({"claude_code": False, "ollama": True})
    assert choose_tool(demand(pinned="ollama", recommended="claude_code"), w) == ("ollama", 1.0)


def test_pinned_tool_absent_rules_the_worker_out() -> None:
    """A worker without the pinned tool cannot run the subtask at all."""
    w = worker({"claude_code": False, "echo": False})
    assert choose_tool(demand(pinned="ollama"), w) is None


def test_match_order_recommended_preference_default_any() -> None:
    """Recommended beats preferences, which beat the default, which beats any tool."""
    w = worker({"codex": False, "gemini_cli": False, "claude_code": False})
    assert choose_tool(demand(recommended="codex", preferences=("gemini_cli",)), w) == (
        "codex",
        1.0,
    )
    assert choose_tool(demand(recommended="nope", preferences=("x", "gemini_cli")), w) == (
        "gemini_cli",
        0.75,
    )
    assert choose_tool(demand(default="claude_code"), w) == ("claude_code", 0.5)
    assert choose_tool(demand(), w) == ("codex", 0.25)


def test_echo_is_never_a_fallback() -> None:
    """A worker with only echo cannot run a subtask that does not ask for echo."""
    w = worker({"echo": False})
    assert choose_tool(demand(), w) is None
    assert choose_tool(demand(default="echo"), w) == ("echo", 0.5)
    assert choose_tool(demand(preferences=("echo",)), w) == ("echo", 0.75)


def test_sensitive_sees_only_local_tools() -> None:
    """For a sensitive task cloud tools are invisible, even when recommended."""
    w = worker({"claude_code": False, "ollama": True})
    assert choose_tool(demand(sensitive=True, recommended="claude_code"), w) == ("ollama", 0.25)
    assert choose_tool(demand(sensitive=True, pinned="claude_code"), w) is None
    assert choose_tool(demand(sensitive=True), worker({"claude_code": False})) is None


def test_excluded_worker_has_no_tool() -> None:
    """An excluded worker is ruled out whatever it offers."""
    w = worker()
    assert choose_tool(demand(exclude=frozenset({w.worker_id})), w) is None


def test_resource_score_blends_load_and_slots() -> None:
    """Half is machine headroom, half is free slots."""
    assert resource_score(worker(slots=2, running=0, load=0.0)) == 1.0
    assert resource_score(worker(slots=2, running=1, load=50.0)) == pytest.approx(0.5)
    assert resource_score(worker(slots=2, running=2, load=100.0)) == 0.0
    assert resource_score(worker(slots=1, load=150.0)) == pytest.approx(0.5)


def test_privacy_score() -> None:
    """Normal tasks fit any tool; sensitive tasks fit only local ones."""
    assert privacy_score(demand(), tool_is_local=False) == 1.0
    assert privacy_score(demand(sensitive=True), tool_is_local=True) == 1.0
    assert privacy_score(demand(sensitive=True), tool_is_local=False) == 0.0


def test_score_weights() -> None:
    """Total is 0.5 tool + 0.3 resources + 0.2 privacy."""
    w = worker({"codex": False}, slots=2, running=1, load=50.0)
    tool, total = score(demand(default="codex"), w) or ("", 0.0)
    assert tool == "codex"
    assert total == pytest.approx(0.5 * 0.5 + 0.3 * 0.5 + 0.2 * 1.0)


def test_allocate_prefers_tool_match_over_resources() -> None:
    """A busy worker with the recommended tool beats an idle one without it."""
    idle = worker({"codex": False})
    busy = worker({"claude_code": False}, slots=4, running=3, load=80.0)
    d = demand(recommended="claude_code")
    resources = 0.5 * 0.2 + 0.5 * 0.25  # 20 % headroom, one of four slots free
    expected = 0.5 * 1.0 + 0.3 * resources + 0.2 * 1.0
    [placed] = allocate([d], [idle, busy])
    assert placed == Assignment(d.subtask_id, busy.worker_id, "claude_code", placed.score)
    assert placed.score == pytest.approx(expected)


def test_allocate_higher_priority_first() -> None:
    """With one slot left, the demand on the longer path gets it."""
    w = worker(slots=1)
    low, high = demand(priority=1.0), demand(priority=5.0)
    assert [a.subtask_id for a in allocate([low, high], [w])] == [high.subtask_id]


def test_allocate_respects_slots_and_spreads_load() -> None:
    """Each placement takes a slot, so equal workers share the work."""
    a, b = worker(slots=2), worker(slots=2)
    demands = [demand() for _ in range(5)]
    placed = allocate(demands, [a, b])
    assert [p.worker_id for p in placed] == [a.worker_id, b.worker_id, a.worker_id, b.worker_id]


def test_allocate_ties_go_to_first_worker_and_keep_demand_order() -> None:
    """Equal priorities keep their order; equal scores go to the first worker listed."""
    a, b = worker(slots=5), worker(slots=5)
    d1, d2 = demand(), demand()
    placed = allocate([d1, d2], [a, b])
    assert [(p.subtask_id, p.worker_id) for p in placed] == [
        (d1.subtask_id, a.worker_id),
        (d2.subtask_id, b.worker_id),
    ]


def test_allocate_skips_full_workers_and_unplaceable_demands() -> None:
    """A full worker takes nothing; a demand nobody can run is left out."""
    full = worker({"ollama": True}, slots=1, running=1)
    free = worker({"claude_code": False})
    sensitive, normal = demand(sensitive=True), demand()
    assert [p.subtask_id for p in allocate([sensitive, normal], [full, free])] == [
        normal.subtask_id
    ]


def test_allocate_never_puts_reviewer_on_author() -> None:
    """An excluded worker is skipped even when it is the best one."""
    author = worker(slots=4)
    other = worker(slots=1, load=90.0)
    d = demand(exclude=frozenset({author.worker_id}))
    assert [p.worker_id for p in allocate([d], [author, other])] == [other.worker_id]


def test_allocate_is_fast() -> None:
    """200 demands over 10 workers take well under a millisecond each."""
    workers = [worker({"claude_code": False, "ollama": True, "echo": False}, slots=30)
               for _ in range(10)]
    demands = [demand(priority=float(i % 7), recommended="ollama") for i in range(200)]
    started = time.perf_counter()
    placed = allocate(demands, workers)
    elapsed = time.perf_counter() - started
    assert len(placed) == 200
    assert elapsed / 200 < 0.001


def test_unplaceable_no_workers() -> None:
    """With no worker online the reason says how to start one."""
    assert "shoal worker" in (unplaceable_reason(demand(), []) or "")


def test_unplaceable_pinned_tool_missing() -> None:
    """A pinned tool nobody offers is named."""
    reason = unplaceable_reason(demand(pinned="claude_code"), [worker({"ollama": True})])
    assert reason is not None
    assert "'claude_code'" in reason
    assert "pinned" in reason


def test_unplaceable_sensitive_without_local_tool() -> None:
    """A sensitive task with only cloud tools online says so."""
    reason = unplaceable_reason(demand(sensitive=True), [worker({"claude_code": False})])
    assert reason is not None
    assert "sensitive" in reason
    assert "local tool" in reason


def test_unplaceable_sensitive_pinned_cloud_tool() -> None:
    """A sensitive task pinned to a cloud-only tool says the tool is not local anywhere."""
    reason = unplaceable_reason(
        demand(sensitive=True, pinned="claude_code"), [worker({"claude_code": False})]
    )
    assert reason is not None
    assert "locally" in reason


def test_unplaceable_all_excluded() -> None:
    """When every worker is excluded the reason says to start another."""
    w = worker()
    reason = unplaceable_reason(demand(exclude=frozenset({w.worker_id})), [w])
    assert reason is not None
    assert "excluded" in reason


def test_unplaceable_only_echo() -> None:
    """Workers offering only echo cannot run an ordinary subtask."""
    reason = unplaceable_reason(demand(), [worker({"echo": False})])
    assert reason is not None
    assert "'echo'" in reason


def test_placeable_even_when_busy() -> None:
    """A worker that could run it but is full right now means no reason."""
    assert unplaceable_reason(demand(), [worker(slots=1, running=1)]) is None
