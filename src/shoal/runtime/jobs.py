"""What the runtime loop is asked to do: one typed job per kind of request.

The API and the worker sockets put jobs in the loop's inbox; the loop decides a batch of them,
commits once, then settles each job's `future` with its `result` or `error`. The loop finds a
job's handler by its type (`Runtime._handlers`).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar

from shoal.engine.inputs import CheckpointDecision
from shoal.engine.model import TaskRecord
from shoal.protocol import AgentLog, AttemptUsage, Heartbeat, TaskResult, WorkerRegister

if TYPE_CHECKING:
    from shoal.engine import planning
    from shoal.runtime.fleet import Connection


@dataclass(slots=True, kw_only=True)
class Job:
    """A request to the runtime loop; `future` (if any) resolves after the commit."""

    future: asyncio.Future[Any] | None = None
    result: Callable[[], Any] | None = None
    error: BaseException | None = None

    bookkeeping: ClassVar[bool] = False
    """No one waits on it: a batch of such jobs alone may linger for the work that follows."""

    def settle(self) -> None:
        """Resolve the future with the job's result or error."""
        if self.future is None or self.future.done():
            return
        if self.error is not None:
            self.future.set_exception(self.error)
        else:
            self.future.set_result(self.result() if self.result else None)


@dataclass(slots=True)
class Wake(Job):
    """Nothing to do: wakes the loop (to stop)."""


@dataclass(slots=True)
class Submit(Job):
    """Store a new task and start it."""

    task: TaskRecord
    plan: planning.Plan | None = None
    options: tuple[Mapping[str, Any], ...] = ()
    plan_items: tuple[Mapping[str, Any], ...] = ()  # the plan as sent, kept if it must wait
    links: list[dict[str, Any]] = field(default_factory=list)  # `task_sources` rows


@dataclass(slots=True)
class Cancel(Job):
    """A user cancels their task."""

    task_id: uuid.UUID
    user_id: uuid.UUID


@dataclass(slots=True)
class DecideCheckpoint(Job):
    """A user decides a checkpoint of their task."""

    task_id: uuid.UUID
    user_id: uuid.UUID
    decision: CheckpointDecision


@dataclass(slots=True)
class Register(Job):
    """A worker connected."""

    msg: WorkerRegister
    token_id: uuid.UUID | None
    send: Callable[[str], Any]
    close: Callable[[int, str], Any]


@dataclass(slots=True)
class Disconnect(Job):
    """A worker's socket closed."""

    conn: Connection


@dataclass(slots=True)
class Beat(Job):
    """A worker's heartbeat: committed at once, not lingering as bookkeeping does (its handling
    time is watched, `shoal_worker_heartbeat_seconds`; ADR 0010)."""

    conn: Connection
    heartbeat: Heartbeat
    posted: float = field(default_factory=time.perf_counter)  # read from the socket


@dataclass(slots=True)
class Hold(Job):
    """An attempt's result has arrived and waits to be stored: keep its lease."""

    conn: Connection
    attempt_id: uuid.UUID
    bookkeeping: ClassVar[bool] = True


@dataclass(slots=True)
class Accepted(Job):
    """A worker started an attempt."""

    conn: Connection | None
    attempt_id: uuid.UUID
    bookkeeping: ClassVar[bool] = True


@dataclass(slots=True)
class Log(Job):
    """A line of live output from an attempt."""

    conn: Connection | None
    msg: AgentLog
    bookkeeping: ClassVar[bool] = True


@dataclass(slots=True)
class Spent(Job):
    """What a live attempt of a task with a budget has spent so far."""

    msg: AttemptUsage
    bookkeeping: ClassVar[bool] = True


@dataclass(slots=True)
class Result(Job):
    """An attempt's result, its files already stored; acknowledged once durable."""

    conn: Connection
    msg: TaskResult
    manifest: list[dict[str, Any]]
    rejected: list[dict[str, Any]]


@dataclass(slots=True)
class Forget(Job):
    """Tell these workers, wherever they are connected, to delete what they keep of deleted
    tasks and of sources nothing refers to any more."""

    worker_ids: tuple[uuid.UUID, ...]
    task_ids: tuple[uuid.UUID, ...]
    sources: tuple[str, ...]
    bookkeeping: ClassVar[bool] = True


@dataclass(slots=True)
class Decline(Job):
    """Attempts that never reached their worker: the copy it is connected to could not pass
    them on, because the worker had left it or (`full`) had no free slot."""

    worker_id: uuid.UUID
    attempt_ids: tuple[uuid.UUID, ...]
    reason: str
    full: bool


@dataclass(slots=True)
class Claims(Job):
    """Renew this copy's task claims and claim orphaned tasks."""


@dataclass(slots=True)
class AdoptTasks(Job):
    """Load and drive the tasks this copy took over."""

    task_ids: frozenset[uuid.UUID]


@dataclass(slots=True)
class ReleaseTasks(Job):
    """Drop the tasks another copy took."""

    task_ids: frozenset[uuid.UUID]


@dataclass(slots=True)
class Admit(Job):
    """Slots of these users' may have freed: start their queued tasks that may start."""

    user_ids: frozenset[uuid.UUID]
    bookkeeping: ClassVar[bool] = True


@dataclass(slots=True)
class Tick(Job):
    """The sweeper's turn: expire leases and checkpoint deadlines that have passed.

    A lease is judged as of `at`, when the sweeper was due to look (ADR 0055), not when the
    runtime gets to the tick: what the workers sent before then (heartbeats, results) is ahead
    of it in the inbox, and what came after is judged by a later tick. None (a tick posted by
    hand): as of the batch."""

    at: datetime | None = None


def sweep_at(now: datetime, *, due: float, woke: float) -> datetime:
    """When a sweeper that woke at `woke` was due (`due`, on the same monotonic clock), as a
    time of `now`'s clock: a loop stalled past `due` has not read what came meanwhile."""
    return now - timedelta(seconds=woke - due) if woke > due else now


async def sweep(post: Callable[[Job], None], every: float,
                clock: Callable[[], datetime]) -> None:
    """The sweeper: a `Tick` every `every` seconds, each as of when it was due, until
    cancelled."""
    loop = asyncio.get_running_loop()
    while True:
        due = loop.time() + every
        await asyncio.sleep(every)
        post(Tick(at=sweep_at(clock(), due=due, woke=loop.time())))
