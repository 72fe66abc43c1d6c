"""Where the control plane's CPU goes in one run, by phase of its work (`bench_dag.py --phases`).

`calls_per_subtask.py` counts Python calls, which do not move with the machine but weigh a call
into C (a SQLite statement, a commit) the same as one line of Python. This measures CPU instead:
it wraps, from outside and only for the benchmark, the functions each phase of a step runs
through, and adds up each one's thread CPU time (`time.thread_time`) on the event loop's thread,
less the time of the wrapped functions it calls (each phase is counted once, where it ran):

- socket in: uvicorn and `websockets` reading a worker's frames off its socket (uvicorn's
  `WebSocketsSansIOProtocol.data_received`);
- frames in: a worker's message parsed and routed to the runtime
  (`worker_ws.parse_worker_message`, `worker_ws._route`);
- runtime: a batch of jobs taken in (`Runtime._process`, less the phases below), each job's
  attempt and task found and its input built (`Runtime._handle`);
- engine: the engine's decision, with the workflow's (`runtime.core.decide`);
- schedule: ready subtasks placed and their `execute_task` built (`Scheduler.schedule`);
- stage: what the decisions changed, as rows to write (`Batch._stage`);
- rows: the rows' parameters made (`BatchWriter.flush`; on PostgreSQL `pg_batch.commit`);
- events: the events' rows and the stored events (`runtime.batch.append_events_sync`);
- statements (C): SQLite running the statements (`store.fast._sqlite`);
- commit (C): SQLite's commit, its WAL frames written (`DefaultDialect.do_commit`);
- transaction: the transaction's own Python, SQLAlchemy's begin and commit and the lock
  (`Database._try_inline`);
- statement (PostgreSQL): the batch's one statement sent, awaited and its answer read
  (`Database.fetch_row_autocommit`);
- after commit: memory, metrics, the sends and the bus (`Runtime._after_commit`);
- acks: the stored results acknowledged to their workers (`dispatch.acknowledge`);
- socket out: a worker's frames written to its socket (`worker_ws.put`: by the socket's `send`
  itself when nothing waits before them, else by `worker_ws._write`, a task of its own);
- bus subscriber: the benchmark's own client taking the events off the in-process bus
  (`QueueSubscription.__anext__`), as an SSE stream or a socket's lane would.

A coroutine is timed step by step (each resume to its next suspension), so the time it waits,
and the other tasks that run meanwhile, are not counted in its phase. The clock is installed
before the control plane starts: uvloop keeps a connection's `data_received` from when the
connection was made.

On SQLite a batch's write runs on the loop's thread (`_try_inline`; on the writer thread, when
the lock is taken, it is not counted). On PostgreSQL it is one statement awaited
(ADR 0023): the server's own work is not this process's CPU.

The rest of the loop's thread's CPU (the event loop, uvicorn's and `websockets`' frames, the
benchmark's own client) and the other threads' (SQLite's WAL checkpoints, the writer thread
when the inline write could not take the lock) are shown after the phases. Each
wrapped call costs about two clock reads and a frame, some 10 to 20 calls a step: use the table
for the split, and the main table (run without `--phases`) for the totals.
"""

from __future__ import annotations

import functools
import inspect
import statistics
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from rich.table import Table

if TYPE_CHECKING:
    from _report import Outcome

PHASES = ("socket in", "frames in", "runtime", "engine", "schedule", "stage", "rows", "events",
          "statements (C)", "commit (C)", "transaction", "statement (PostgreSQL)",
          "after commit", "acks", "socket out", "bus subscriber")


class PhaseClock:
    """Thread CPU per phase on the thread that installed it (the control plane's loop)."""

    def __init__(self) -> None:
        self.totals = dict.fromkeys(PHASES, 0.0)
        self._stack: list[float] = []  # per open wrapped call: its wrapped callees' time
        self._thread = threading.get_ident()
        self._since = time.thread_time()

    def reset(self) -> None:
        """Start counting again from zero."""
        self.totals = dict.fromkeys(PHASES, 0.0)
        self._since = time.thread_time()

    def snapshot(self) -> dict[str, float]:
        """Seconds per phase since the last reset, and the loop's thread's whole CPU
        (`LOOP_THREAD`; read on that thread)."""
        return {**self.totals, LOOP_THREAD: time.thread_time() - self._since}

    def wrap(self, phase: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        """`fn`, counting its own thread CPU (less its wrapped callees') into `phase`."""
        clock, stack, thread, get_ident = time.thread_time, self._stack, self._thread, \
            threading.get_ident

        def add(start: float) -> None:
            spent = clock() - start
            self.totals[phase] += spent - stack.pop()
            if stack:
                stack[-1] += spent

        if inspect.iscoroutinefunction(fn):
            @functools.wraps(fn)
            async def timed_async(*args: Any, **kwargs: Any) -> Any:
                return await _Stepped(fn(*args, **kwargs), clock, stack, add)
            return timed_async

        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if get_ident() != thread:  # the store's writer thread: not the loop's CPU
                return fn(*args, **kwargs)
            start = clock()
            stack.append(0.0)
            try:
                return fn(*args, **kwargs)
            finally:
                add(start)
        return timed


class _Stepped:
    """Awaits a coroutine, timing each of its steps (from one resume to the next suspension)
    as a wrapped call: the time it waits is not counted, nor that of the other tasks that run
    meanwhile."""

    __slots__ = ("add", "clock", "coro", "stack")

    def __init__(self, coro: Any, clock: Callable[[], float], stack: list[float],
                 add: Callable[[float], None]) -> None:
        self.coro, self.clock, self.stack, self.add = coro, clock, stack, add

    def __await__(self) -> Any:
        step = self.coro.__await__()
        value: Any = None
        error: BaseException | None = None
        while True:
            start = self.clock()
            self.stack.append(0.0)
            try:
                yielded = step.send(value) if error is None else step.throw(error)
            except StopIteration as stop:
                self.add(start)
                return stop.value
            except BaseException:
                self.add(start)
                raise
            self.add(start)
            value, error = None, None
            try:
                value = yield yielded
            except BaseException as exc:  # (cancellation, say) goes on into the coroutine
                error = exc


@contextmanager
def phase_clock() -> Iterator[PhaseClock]:
    """Install a `PhaseClock` over the control plane's functions; restore them on exit."""
    from sqlalchemy.engine.default import DefaultDialect
    from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

    from shoal.api import worker_ws
    from shoal.bus.memory import QueueSubscription
    from shoal.runtime import batch, core, dispatch, scheduling
    from shoal.store import db, fast, pg_batch, state

    clock = PhaseClock()
    targets: list[tuple[Any, str, str]] = [
        (WebSocketsSansIOProtocol, "data_received", "socket in"),
        (worker_ws, "parse_worker_message", "frames in"),
        (worker_ws, "_route", "frames in"),
        (core.Runtime, "_process", "runtime"),
        (core.Runtime, "_handle", "runtime"),
        (core, "decide", "engine"),
        (scheduling.Scheduler, "schedule", "schedule"),
        (batch.Batch, "_stage", "stage"),
        (state.BatchWriter, "flush", "rows"),
        (pg_batch, "commit", "rows"),
        (batch, "append_events_sync", "events"),
        (fast, "_sqlite", "statements (C)"),
        (DefaultDialect, "do_commit", "commit (C)"),
        (db.Database, "_try_inline", "transaction"),
        (db.Database, "fetch_row_autocommit", "statement (PostgreSQL)"),
        (core.Runtime, "_after_commit", "after commit"),
        (dispatch, "acknowledge", "acks"),
        (worker_ws, "_write", "socket out"),
        (worker_ws, "put", "socket out"),
        (QueueSubscription, "__anext__", "bus subscriber"),
    ]
    saved = [(owner, name, owner.__dict__[name]) for owner, name, _ in targets]
    try:
        for owner, name, phase in targets:
            setattr(owner, name, clock.wrap(phase, getattr(owner, name)))
        yield clock
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)


C_PHASES = ("statements (C)", "commit (C)")
LOOP_THREAD = "loop thread"  # a snapshot's key for the loop's thread's CPU, phases and all


def phase_table(kind: str, outcomes: Sequence[Outcome]) -> Table:
    """µs of control-plane CPU per subtask by phase, per workload (median over its runs), with
    each phase's share of the process's CPU."""
    measured = [o for o in outcomes if o.runs and all(r.phases for r in o.runs)]
    table = Table(title=f"Control-plane CPU per subtask by phase — {kind} (µs, share)")
    table.add_column("phase")
    for o in measured:
        table.add_column(o.work.key, justify="right")

    def per_subtask(o: Outcome, value: Callable[[Any], float]) -> float:
        return statistics.median(value(r) for r in o.runs) / o.n * 1e6

    def row(label: str, value: Callable[[Any], float], style: str = "") -> None:
        cells = []
        for o in measured:
            us, whole = per_subtask(o, value), per_subtask(o, lambda r: r.cpu)
            cells.append(f"{us:,.0f} ({us / whole:.0%})" if whole else f"{us:,.0f}")
        table.add_row(label, *cells, style=style)

    for phase in PHASES:
        row(phase, lambda r, p=phase: r.phases[p])
    def phases(r: Any) -> float:
        return sum(r.phases[p] for p in PHASES)

    row("SQLite itself (the C phases)", lambda r: sum(r.phases[p] for p in C_PHASES), "bold")
    row("the phases", phases, "bold")
    row("the rest of the loop's thread: loop, sockets, client",
        lambda r: r.phases[LOOP_THREAD] - phases(r))
    row("other threads: SQLite's checkpoints, the writer", lambda r: r.cpu - r.phases[LOOP_THREAD])
    row("process CPU", lambda r: r.cpu, "bold")
    return table
