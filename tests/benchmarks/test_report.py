"""The DAG benchmark's split of a layered workload's makespan (`benchmarks/_report.py`): each
layer's time beyond its subtasks' own, shared between the worker and the control plane, from
the worker's stamps."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from _report import Outcome, Run, attach_timings, layer_split
from _workloads import Workload, depths, layered

DELAY = 0.05


def stamps(recv: float, sent: float) -> dict[str, float | str]:
    return {"recv": recv, "sent": sent, "task_id": "t", "cpu_recv": 0.0, "cpu_sent": 0.0}


def test_layers_are_counted_from_the_roots() -> None:
    dag = {"a": [], "b": [], "c": ["a"], "d": ["c", "b"]}
    assert depths(dag) == {"a": 0, "b": 0, "c": 1, "d": 2}


def test_each_layer_is_split_at_the_last_result_sent() -> None:
    dag = {"a": [], "b": [], "c": ["a", "b"], "d": ["a"]}
    records = {
        "a": stamps(0.000, 0.051),
        "b": stamps(0.001, 0.053),  # the layer's last result: 2 ms over its 50 ms, from 1 ms
        "c": stamps(0.058, 0.110),
        "d": stamps(0.055, 0.106),  # c started last: 5 ms after b's result left
    }
    worker, plane = layer_split(dag, records, DELAY)
    assert worker == [pytest.approx(2.0)]
    assert plane == [pytest.approx(5.0)]


def test_a_layer_not_wholly_recorded_is_left_out() -> None:
    dag = {"a": [], "b": ["a"], "c": ["b"]}
    records = {"a": stamps(0.0, 0.051), "b": stamps(0.053, 0.104)}  # c never reported
    worker, plane = layer_split(dag, records, DELAY)
    assert worker == [pytest.approx(1.0)]
    assert plane == [pytest.approx(2.0)]


def test_the_parts_add_up_to_the_span_from_the_first_layer_to_the_last() -> None:
    dag = layered(4, 3, 2, seed=7)
    records: dict[str, dict[str, float | str]] = {}
    t = 0.0
    depth = depths(dag)
    for name in dag:  # a layer starts together, 3 ms after the layer above sent its results
        layer = depth[name]
        start = layer * (DELAY + 0.004) + 0.001
        records[f"attempt-{name}"] = {**stamps(start, start + DELAY + 0.001), "name": name}
        t = max(t, start)
    outcome = Outcome(Workload("W3", "4x3", dag, DELAY, layers=4),
                      runs=[Run("t", 0.0, 0.3, "task_complete", 0.1)])
    attach_timings(outcome, records)
    spans = [w + p + DELAY * 1000 for w, p in zip(outcome.layer_worker_ms,
                                                   outcome.layer_plane_ms, strict=True)]
    assert len(spans) == 3
    assert sum(spans) == pytest.approx((t - 0.001) * 1000)
    assert outcome.layer_worker_ms == [pytest.approx(1.0)] * 3
    assert outcome.layer_plane_ms == [pytest.approx(3.0)] * 3


def test_the_submission_runs_from_the_post_to_the_first_subtask_received() -> None:
    dag = {"a": [], "b": ["a"]}
    records = {"1": {**stamps(10.030, 10.031), "name": "a"},
               "2": {**stamps(10.035, 10.036), "name": "b"},
               "3": {**stamps(10.001, 10.002), "name": "a", "task_id": "another"}}
    outcome = Outcome(Workload("W2", "chain", dag, 0.0),
                      runs=[Run("t", 10.0, 0.04, "task_complete", 0.01)])
    attach_timings(outcome, records)
    assert outcome.first_start_ms == [pytest.approx(30.0)]
