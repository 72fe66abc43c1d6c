"""`Metrics.committed` observes a typed plan's wave metrics once, when its task completes, read
from the committed subtasks; tasks without a typed plan, and ones that did not complete, add
nothing."""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import timedelta

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from shoal.engine.model import SubtaskRecord, TaskRecord, TaskState
from shoal.metrics import Metrics, StreamKind, WalCheckpoint, WalStatus
from shoal.states import TaskStatus
from tests.engine.test_waves import T0, TASK, at, sub


def state(status: TaskStatus, *subs: SubtaskRecord) -> TaskState:
    task = TaskRecord(id=TASK, user_id=uuid.uuid4(), description="q", status=status,
                      created_at=T0, updated_at=T0, workflow="research")
    return TaskState(task=task, subtasks={s.id: s for s in subs}, attempts={})


def samples(metrics: Metrics) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    text = generate_latest(metrics.registry).decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


PLAN = (sub("plan#1.1", 0, 0, 1), sub("plan#1.2", 0, 0, 1), sub("plan#1.3", 1, 1.04, 2),
        sub("plan#1.4", 2, 2.3, 3))
RESEARCH = frozenset({("workflow", "research")})


def test_a_completed_typed_plan_is_observed_once() -> None:
    """Its ratio once, each transition once (40 ms, 300 ms); a later commit of the ended task
    adds nothing."""
    metrics = Metrics()
    running, done = state(TaskStatus.IN_PROGRESS, *PLAN), state(TaskStatus.COMPLETED, *PLAN)
    metrics.committed(running, done, (), (), at(3))
    metrics.committed(done, done, (), (), at(4))
    found = samples(metrics)
    assert found[("shoal_task_parallelism_ratio_count", RESEARCH)] == 1
    assert found[("shoal_task_parallelism_ratio_sum", RESEARCH)] == round(3.66 / (3 * 2), 4)
    assert found[("shoal_wave_transition_seconds_count", RESEARCH)] == 2
    assert found[("shoal_wave_transition_seconds_bucket", RESEARCH | {("le", "0.05")})] == 1
    assert found[("shoal_wave_transition_seconds_bucket", RESEARCH | {("le", "0.5")})] == 2


def test_a_failed_task_or_one_without_a_typed_plan_adds_no_observation() -> None:
    metrics = Metrics()
    metrics.committed(state(TaskStatus.IN_PROGRESS, *PLAN), state(TaskStatus.FAILED, *PLAN),
                      (), (), at(3))
    plain = [replace(s, options=replace(s.options, wave=None)) for s in PLAN]
    metrics.committed(state(TaskStatus.IN_PROGRESS, *plain),
                      state(TaskStatus.COMPLETED, *plain), (), (), at(3))
    found = samples(metrics)
    assert ("shoal_task_parallelism_ratio_count", RESEARCH) not in found
    assert ("shoal_wave_transition_seconds_count", RESEARCH) not in found


def test_a_burst_with_one_stamp_counts_each_event_as_its_own_would() -> None:
    """`delivered_all` works a shared stamp's lag out once: the histogram is the same as
    each event's lag observed alone, for every socket it went to."""
    now = T0 + timedelta(seconds=3)
    stamps = [T0, T0, T0 + timedelta(seconds=2.5), T0 + timedelta(seconds=2.5), now, T0]
    together, alone = Metrics(), Metrics()
    together.delivered_all(StreamKind.WEBSOCKET, stamps, now, times=4)
    for stamp in stamps:
        for _ in range(4):
            alone.delivered(StreamKind.WEBSOCKET, stamp, now)
    assert together.fanout_lag.series == alone.fanout_lag.series
    assert together.fanout_lag.series[("websocket",)][-1] == 4 * (3 + 3 + 0.5 + 0.5 + 0 + 3)


def test_the_wal_is_served_where_the_store_has_one() -> None:
    """On SQLite `/metrics` serves the WAL's size and the checkpoints by kind (every kind, 0
    until one happens); on PostgreSQL (no WAL status) the families are there, empty."""
    metrics = Metrics()
    assert not [key for key in samples(metrics) if key[0].startswith("shoal_sqlite")]
    metrics.watch(dict, list, lambda: WalStatus(8192, {WalCheckpoint.PASSIVE: 3,
                                                       WalCheckpoint.DEFERRED: 2}))
    found = {key: v for key, v in samples(metrics).items() if key[0].startswith("shoal_sqlite")}
    assert found == {
        ("shoal_sqlite_wal_bytes", frozenset()): 8192,
        **{("shoal_sqlite_checkpoints_total", frozenset({("kind", kind.value)})): n
           for kind, n in ((WalCheckpoint.PASSIVE, 3), (WalCheckpoint.RESTARTED, 0),
                           (WalCheckpoint.DEFERRED, 2), (WalCheckpoint.FAILED, 0))}}
