"""`benchmarks/worker_roundtrip.py` drives Shoal's worker process and the floor's alike, one
attempt at a time, and says what Shoal's adds to a chain's step."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))

from _shoal_worker import acks_frame, results_of
from worker_roundtrip import Round, measure, shoal_frame, summary

from shoal.protocol import Acks, ExecuteTasks, parse_server_message


def test_the_frames_are_the_protocols_own() -> None:
    frame, (attempt,) = shoal_frame("7d3f9c2e-0000-4000-8000-000000000001")
    message = parse_server_message(frame)  # what the worker reads, checked as it checks it
    assert isinstance(message, ExecuteTasks)
    (step,) = message.tasks
    assert str(step.attempt_id) == attempt
    assert step.tool == "echo"
    assert len(step.upstream) == 1
    second, (other,) = shoal_frame("7d3f9c2e-0000-4000-8000-000000000001")
    assert other != attempt  # every step its own attempt and subtask
    assert json.loads(second)["tasks"][0]["subtask_id"] != str(step.subtask_id)
    acks = parse_server_message(acks_frame([attempt, other]))
    assert isinstance(acks, Acks)
    assert [str(a.attempt_id) for a in acks.acks] == [attempt, other]
    assert all(a.accepted for a in acks.acks)


def test_a_result_is_told_from_other_frames() -> None:
    assert results_of('{"type": "task_result", "attempt_id": "a", "status": "succeeded"}') == [
        "a"]
    assert results_of('{"type": "task_results", "results": ['
                      '{"attempt_id": "a", "status": "succeeded"}, '
                      '{"attempt_id": "b", "status": "succeeded"}]}') == ["a", "b"]
    assert results_of('{"type": "heartbeat"}') is None


def test_a_result_that_did_not_succeed_stops_the_benchmark() -> None:
    with pytest.raises(RuntimeError, match="declined for attempt b: worker has no free slot"):
        results_of('{"type": "task_results", "results": ['
                   '{"attempt_id": "a", "status": "succeeded"}, {"attempt_id": "b", '
                   '"status": "declined", "error": "worker has no free slot"}]}')


def test_the_summary_takes_each_workers_medians_then_compares() -> None:
    rounds = [Round("shoal", [300e-6] * 9 + [900e-6], cpu=0.003, steal=[0.0]),
              Round("floor", [200e-6] * 10, cpu=0.002, steal=[0.01]),
              Round("shoal", [500e-6] * 10, cpu=0.005, steal=[0.0]),
              Round("floor", [200e-6] * 10, cpu=0.002, steal=[0.0]),
              Round("shoal", [400e-6] * 10, cpu=0.004, steal=[0.02])]
    figures = summary(rounds)
    assert figures["shoal"]["rounds"] == 3
    assert figures["floor"]["rounds"] == 2
    assert figures["shoal"]["p50_us"] == pytest.approx(400)  # the median of 300, 500, 400
    assert figures["shoal"]["cpu_us"] == pytest.approx(400)  # 4 ms over 10 attempts
    assert figures["floor"]["p90_us"] == pytest.approx(200)
    assert figures["floor"]["steal"] == pytest.approx(0.01)  # the highest round's median
    assert figures["added_us"]["p50_us"] == pytest.approx(200)
    assert figures["ratio"]["cpu_us"] == pytest.approx(2.0)


async def test_both_workers_run_a_short_chain() -> None:
    rounds = await measure(steps=20, rounds=2, warm=5)
    assert [r.worker for r in rounds] == ["shoal", "floor", "floor", "shoal"]  # in turn
    for r in rounds:
        assert len(r.trips) == 20
        assert all(0 < trip < 5 for trip in r.trips)
        assert r.cpu > 0  # the worker process's, read from its threads


async def test_both_workers_run_bursts_and_the_cpu_is_counted_an_attempt() -> None:
    rounds = await measure(steps=3, rounds=1, warm=1, burst=25)
    assert [(r.worker, r.burst, len(r.trips)) for r in rounds] == [("shoal", 25, 3),
                                                                   ("floor", 25, 3)]
    for r in rounds:  # a step waits for every result of its frame
        assert r.figures()["cpu_us"] == pytest.approx(r.cpu / 75 * 1e6)


async def test_a_burst_past_a_hundred_finds_a_slot_for_each_attempt() -> None:
    # A worker of 100 slots declines part of a frame of 150 (and reads the frame twice): the
    # benchmark's worker has a slot for each, as the control plane would send it no more.
    (shoal, floor) = await measure(steps=1, rounds=1, warm=0, burst=150)
    assert (shoal.worker, len(shoal.trips), floor.worker) == ("shoal", 1, "floor")
