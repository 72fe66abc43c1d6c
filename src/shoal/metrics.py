"""What an operator graphs: Prometheus counters, histograms and gauges of one control plane.

Each control plane has a registry of its own (`Metrics.registry`, served at `/metrics`), so
copies in one process — tests, `shoal up` — never share counts. The runtime reports what each
committed batch changed (`committed`; for a task with a typed plan that completed, its wave
metrics too, from its committed subtasks: `shoal.engine.waves`), the attempts it sent
(`dispatched`) and the results it refused (`fenced`); the API reports request times, client
streams and the lag of the events it delivers. Label values are bounded: statuses and
outcomes are closed sets, and tool, model, workflow and route names keep their first
`MAX_LABELS` values, then become `other`, so a worker or a client cannot blow up the number of
series. No id is ever a label.

The series are plain Python numbers that one collector turns into Prometheus families when
scraped: everything that feeds them runs on the control plane's one event loop, so they need
none of `prometheus_client`'s per-value locks, and an observation on the runtime's per-subtask
path costs a dict lookup and a `bisect` instead of a dozen calls.
"""

from __future__ import annotations

import bisect
import contextlib
import math
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from shoal.engine.waves import measure_waves
from shoal.states import TERMINAL_ATTEMPT, TERMINAL_TASK, AttemptStatus, SubtaskStatus, TaskStatus

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

    from shoal.engine.model import AttemptRecord, TaskState

MAX_LABELS = 50  # distinct values kept per open label (tool, model, workflow, route)
MAX_READY = 200_000  # queued subtasks whose ready time is kept for the dispatch latency
OTHER = "other"
NONE = "none"  # an attempt whose tool named no model (echo)

# Seconds. An attempt is a model session: seconds to an hour.
RUN_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600)
# From ready to sent to a worker: milliseconds when a slot is free, minutes when none is.
DISPATCH_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
                    30, 60, 300)
HTTP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
LAG_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)
# A typed plan's wave transition (seed 002's target: under 100 ms) and its parallelism ratio.
WAVE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
RATIO_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)


class Outcome(StrEnum):
    """How an attempt ended, as `shoal_attempts_total` counts it."""

    COMPLETED = "completed"  # succeeded
    FAILED = "failed"  # failed (or its lease expired) and its subtask failed
    RETRIED = "retried"  # failed (or its lease expired) and its subtask runs again
    FENCED = "fenced"  # its result came after its lease was lost and was refused
    CANCELLED = "cancelled"
    DECLINED = "declined"  # the worker had no room (or was leaving): it never ran, no try spent


class StreamKind(StrEnum):
    """A client's live connection."""

    WEBSOCKET = "websocket"
    SSE = "sse"


class WalCheckpoint(StrEnum):
    """What one of SQLite's WAL checkpoints did, as `shoal_sqlite_checkpoints_total` counts it
    (ADR 0050)."""

    PASSIVE = "passive"  # copied the frames the WAL held when it began, beside the writes
    RESTARTED = "restarted"  # the WAL had grown past its mark: copied the rest, started it again
    DEFERRED = "deferred"  # a restart gave way to a reader of the WAL or another process's write
    FAILED = "failed"  # an error (logged); the next checkpoint opens a fresh connection


@dataclass(frozen=True, slots=True)
class WalStatus:
    """SQLite's write-ahead log as scraped: its file's size now and its checkpoints so far."""

    size: int
    checkpoints: Mapping[WalCheckpoint, int]


class Bounded:
    """Label values as given for the first `limit` distinct ones, `other` after that."""

    def __init__(self, limit: int = MAX_LABELS) -> None:
        self._limit = limit
        self._seen: set[str] = set()

    def __call__(self, value: str | None) -> str:
        if not value:
            return NONE
        if value in self._seen:
            return value
        if len(self._seen) >= self._limit or len(value) > 100:
            return OTHER
        self._seen.add(value)
        return value


class Series:
    """A labelled counter or gauge: a number per tuple of label values."""

    def __init__(self, name: str, documentation: str, labels: tuple[str, ...]) -> None:
        self.name, self.documentation, self.labels = name, documentation, labels
        self.values: dict[tuple[str, ...], float] = {}

    def add(self, key: tuple[str, ...], amount: float = 1.0) -> None:
        """Add `amount` (negative for a gauge going down) to the series `key`."""
        self.values[key] = self.values.get(key, 0.0) + amount

    def counter(self) -> CounterMetricFamily:
        family = CounterMetricFamily(self.name, self.documentation, labels=self.labels)
        for key, number in self.values.items():
            family.add_metric(key, number)
        return family

    def gauge(self) -> GaugeMetricFamily:
        family = GaugeMetricFamily(self.name, self.documentation, labels=self.labels)
        for key, number in self.values.items():
            family.add_metric(key, number)
        return family


class Distribution:
    """A labelled histogram: per tuple of label values, a count per bucket and a sum."""

    def __init__(self, name: str, documentation: str, labels: tuple[str, ...],
                 buckets: tuple[float, ...]) -> None:
        self.name, self.documentation, self.labels = name, documentation, labels
        self.bounds = buckets
        self.series: dict[tuple[str, ...], list[float]] = {}  # bucket counts, +Inf, then sum

    def observe(self, key: tuple[str, ...], value: float) -> None:
        """Count one observation of `value` (seconds) in the series `key`."""
        counts = self.series.get(key)
        if counts is None:
            counts = self.series[key] = [0.0] * (len(self.bounds) + 2)
        counts[bisect.bisect_left(self.bounds, value)] += 1  # the first bucket `le` ≥ value
        counts[-1] += value

    def observe_all(self, key: tuple[str, ...], values: list[float], times: int = 1) -> None:
        """`observe` each of `values` in the series `key`, `times` times each (one stream's
        lags, for every socket a shared writer sent them to)."""
        counts = self.series.get(key)
        if counts is None:
            counts = self.series[key] = [0.0] * (len(self.bounds) + 2)
        bounds, where = self.bounds, bisect.bisect_left
        for value in values:
            counts[where(bounds, value)] += times
        counts[-1] += sum(values) * times

    def family(self) -> HistogramMetricFamily:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labels)
        for key, counts in self.series.items():
            running, buckets = 0.0, []
            for bound, count in zip((*self.bounds, math.inf), counts, strict=False):
                running += count
                buckets.append(("+Inf" if bound == math.inf else repr(float(bound)),
                                running))
            family.add_metric(key, buckets, sum_value=counts[-1])
        return family


class Metrics:
    """One control plane's metrics and the bookkeeping that feeds them."""

    def __init__(self) -> None:
        self.tasks = Series("shoal_tasks", "Tasks that reached a final status (completed, "
                            "failed, cancelled, budget_exceeded)", ("workflow", "status"))
        self.attempts = Series(
            "shoal_attempts", "Subtask attempts that ended, by outcome (a result refused after "
            "its attempt is gone counts as fenced under tool 'unknown')", ("tool", "outcome"))
        self.input_tokens = Series("shoal_model_input_tokens", "Model input tokens the attempts "
                                   "reported (model 'none' for a tool that uses none)",
                                   ("tool", "model"))
        self.output_tokens = Series("shoal_model_output_tokens", "Model output tokens the "
                                    "attempts reported", ("tool", "model"))
        self.cost = Series("shoal_model_cost_usd", "Model cost in US dollars the attempts "
                           "reported or list prices give", ("tool", "model"))
        self.run_time = Distribution("shoal_attempt_duration_seconds",
                                     "Run time of subtask attempts (start, or dispatch, to "
                                     "result)", ("tool",), RUN_BUCKETS)
        self.dispatch_latency = Distribution(
            "shoal_dispatch_latency_seconds",
            "From a subtask being ready (its dependencies met, its retry time reached) to its "
            "attempt being sent to a worker: queueing for a free slot plus Shoal's own time", (),
            DISPATCH_BUCKETS)
        self.http_time = Distribution("shoal_http_request_duration_seconds",
                                      "HTTP request time by route template ('unmatched' for "
                                      "none) and status class (2xx); an event stream is timed "
                                      "to its headers", ("method", "route", "status"),
                                      HTTP_BUCKETS)
        self.heartbeat_time = Distribution(
            "shoal_worker_heartbeat_seconds",
            "From a worker's heartbeat being read to the commit that stored it (leases renewed, "
            "the worker's row): how far behind the runtime is with its workers", (),
            DISPATCH_BUCKETS)
        self.fanout_lag = Distribution(
            "shoal_event_fanout_lag_seconds",
            "From an event being stored to its delivery on a live client stream (replayed "
            "events are not counted)", ("stream",), LAG_BUCKETS)
        self.wave_transition = Distribution(
            "shoal_wave_transition_seconds",
            "Typed plans: from the last completion of a wave to the first start of the next "
            "(observed when the task completes; 0 when the next wave was dispatched in the "
            "batch that decided the last gate)", ("workflow",), WAVE_BUCKETS)
        self.parallelism = Distribution(
            "shoal_task_parallelism_ratio",
            "Typed plans: the planned tasks' run time over (their span x the most that ran at "
            "once), one per completed task", ("workflow",), RATIO_BUCKETS)
        self.streams = Series("shoal_client_streams", "Open live client streams (WebSocket and "
                              "SSE)", ("stream",))
        for kind in StreamKind:
            self.streams.add((kind.value,), 0)
        self._tools = Bounded()
        self._models = Bounded()
        self._workflows = Bounded()
        self._routes = Bounded(200)
        self._ready_at: dict[uuid.UUID, datetime] = {}  # queued subtask → when it became ready
        self._counts: Callable[[], dict[str, int]] = dict
        self._workers: Callable[[], Iterable[tuple[str, int]]] = list
        self._wal: Callable[[], WalStatus | None] = _no_wal
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Collector(self))

    def watch(self, counts: Callable[[], dict[str, int]],
              workers: Callable[[], Iterable[tuple[str, int]]],
              wal: Callable[[], WalStatus | None] | None = None) -> None:
        """Read at scrape time: the runtime's counts, its workers by state and the store's
        write-ahead log (SQLite's; None elsewhere)."""
        self._counts, self._workers = counts, workers
        self._wal = wal or _no_wal

    # ---- the runtime ------------------------------------------------------------------------

    def committed(self, old: TaskState, new: TaskState, attempts: Iterable[AttemptRecord],
                  touched: Iterable[uuid.UUID], now: datetime) -> None:
        """Count what one committed batch changed in one task: its state before and after,
        the attempts it changed and the subtasks it touched (at `now`, the batch's time)."""
        for att in attempts:
            if att.status in TERMINAL_ATTEMPT:
                self.attempt_ended(att, _outcome(att, new))
        ready = self._ready_at
        if new.task.status in TERMINAL_TASK:
            if old.task.status not in TERMINAL_TASK:
                self.tasks.add((self._workflows(new.task.workflow), new.task.status.value))
                if new.task.status is TaskStatus.COMPLETED:
                    self.task_completed(new)
            for sid in new.subtasks:
                ready.pop(sid, None)
            return
        for sid in touched:
            sub = new.subtasks.get(sid)
            if sub is None:
                continue
            if sub.status is SubtaskStatus.QUEUED:
                if sid not in ready:
                    if len(ready) >= MAX_READY:  # tasks handed to another copy left theirs
                        ready.clear()
                    ready[sid] = max(now, sub.not_before) if sub.not_before else now
            elif sub.status is not SubtaskStatus.IN_PROGRESS and sid in ready:
                del ready[sid]  # (`in` and `del`: operators, where `pop` is a call)

    def task_completed(self, state: TaskState) -> None:
        """Observe a completed task's wave metrics, if it ran a typed plan (its committed
        subtasks: `shoal.engine.waves`)."""
        found = measure_waves(state.subtasks.values())
        if found is None:
            return
        key = (self._workflows(state.task.workflow),)
        if found.parallelism_ratio is not None:
            self.parallelism.observe(key, found.parallelism_ratio)
        for ms in found.transitions_ms:
            if ms is not None:  # an overlap (eager) is no wait at all
                self.wave_transition.observe(key, max(0.0, ms / 1000))

    def attempt_ended(self, att: AttemptRecord, outcome: Outcome) -> None:
        """Count one attempt that ended: outcome, run time, tokens and cost."""
        tool = self._tools(att.tool)
        self.attempts.add((tool, outcome._value_))  # `.value`: two calls more
        if att.finished_at is not None:
            start = att.started_at or att.dispatched_at
            self.run_time.observe((tool,), max(0.0, (att.finished_at - start).total_seconds()))
        usage = att.usage
        if not usage:
            return
        get = usage.get
        inp, out, cost = get("input_tokens"), get("output_tokens"), get("cost_usd")
        if not (inp or out or cost):  # nothing spent (a tool that counts no tokens)
            return
        model = self._models(_text(get("model")))
        inp, out, cost = _number(inp), _number(out), _number(cost)
        if inp:
            self.input_tokens.add((tool, model), inp)
        if out:
            self.output_tokens.add((tool, model), out)
        if cost:
            self.cost.add((tool, model), cost)

    def dispatched(self, subtask_ids: Iterable[uuid.UUID], ready: datetime,
                   sent: datetime) -> None:
        """Observe the dispatch latency of attempts sent at `sent`; a subtask not noted as
        queued became ready in the batch that started at `ready`."""
        ready_at, observe = self._ready_at, self.dispatch_latency.observe
        for sid in subtask_ids:
            became = ready
            if sid in ready_at:  # (`in` and `del`: operators, where `pop` is a call)
                became = ready_at[sid]
                del ready_at[sid]
            observe((), max(0.0, (sent - became).total_seconds()))

    def fenced(self, tool: str | None) -> None:
        """Count a result refused because its attempt had lost its lease."""
        self.attempts.add((self._tools(tool or "unknown"), Outcome.FENCED.value))

    # ---- the API ----------------------------------------------------------------------------

    def request(self, method: str, route: str | None, status: int, seconds: float) -> None:
        """Observe one HTTP request (`route` is its template; None when nothing matched)."""
        self.http_time.observe((method if method in _METHODS else OTHER,
                                self._routes(route) if route else "unmatched",
                                f"{status // 100}xx"), seconds)

    @contextlib.contextmanager
    def open_stream(self, kind: StreamKind) -> Iterator[None]:
        """Count a live client stream as open while inside."""
        key = (kind.value,)
        self.streams.add(key, 1)
        try:
            yield
        finally:
            self.streams.add(key, -1)

    def heartbeats(self, posted: Iterable[float], now: float) -> None:
        """Observe the handling time of heartbeats read at `posted` and committed at `now`
        (`time.perf_counter()` both)."""
        for at in posted:
            self.heartbeat_time.observe((), now - at)

    def delivered(self, kind: StreamKind, stored: datetime, now: datetime) -> None:
        """Observe the lag of one live event delivered to a client stream."""
        self.fanout_lag.observe((kind.value,), max(0.0, (now - stored).total_seconds()))

    def delivered_all(self, kind: StreamKind, stored: Iterable[datetime], now: datetime,
                      times: int = 1) -> None:
        """Observe the lag of live events stored at `stored`, delivered together at `now` (to
        `times` sockets)."""
        lags: list[float] = []
        last, lag = None, 0.0
        for at in stored:  # a commit's events share one stamp: its lag worked out once
            if at is not last:
                last, lag = at, max(0.0, (now - at).total_seconds())
            lags.append(lag)
        self.fanout_lag.observe_all((kind.value,), lags, times)


_METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"})


def _outcome(att: AttemptRecord, state: TaskState) -> Outcome:
    if att.status is AttemptStatus.SUCCEEDED:
        return Outcome.COMPLETED
    if att.status is AttemptStatus.CANCELLED:
        return Outcome.CANCELLED
    if att.status is AttemptStatus.DECLINED:
        return Outcome.DECLINED
    sub = state.subtasks.get(att.subtask_id)
    again = sub is not None and sub.status in (SubtaskStatus.QUEUED, SubtaskStatus.IN_PROGRESS)
    return Outcome.RETRIED if again else Outcome.FAILED


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and value > 0 else 0.0


class _Collector(Collector):
    """The families of one `Metrics`, built when scraped."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterable[Metric]:
        m = self._metrics
        for series in (m.tasks, m.attempts, m.input_tokens, m.output_tokens, m.cost):
            yield series.counter()
        for distribution in (m.run_time, m.dispatch_latency, m.heartbeat_time, m.http_time,
                             m.fanout_lag,
                             m.wave_transition, m.parallelism):
            yield distribution.family()
        yield m.streams.gauge()
        counts = m._counts()
        for name, documentation in (
                ("active_tasks", "Unfinished tasks this control plane drives"),
                ("queued", "Subtasks ready and waiting for a worker slot"),
                ("live_attempts", "Attempts dispatched or running")):
            yield GaugeMetricFamily(f"shoal_{name}", documentation, value=counts.get(name, 0))
        by_state = GaugeMetricFamily("shoal_workers", "Workers connected here, by state: "
                                     "online (a free slot) or busy (every slot taken)",
                                     labels=["state"])
        for state, count in m._workers():
            by_state.add_metric([state], count)
        yield by_state
        wal = m._wal()
        size = GaugeMetricFamily(
            "shoal_sqlite_wal_bytes", "SQLite: the size of the database's write-ahead log (its "
            "-wal file) now. It settles while the checkpoints keep up and grows while they "
            "cannot (a long read holding the WAL, say); none on PostgreSQL")
        checkpoints = CounterMetricFamily(
            "shoal_sqlite_checkpoints", "SQLite: the WAL checkpoints this control plane ran, by "
            "what they did; none on PostgreSQL", labels=["kind"])
        if wal is not None:
            size.add_metric([], wal.size)
            for kind in WalCheckpoint:
                checkpoints.add_metric([kind.value], wal.checkpoints.get(kind, 0))
        yield size
        yield checkpoints


def _no_wal() -> WalStatus | None:
    return None
