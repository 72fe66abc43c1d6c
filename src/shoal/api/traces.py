"""Task and subtask spans, emitted by the control plane that drove the task, as they end.

`TaskTraces` follows the event bus, so nothing is added to the runtime's path: on the final
snapshot of a task or subtask (`task_update` / `subtask_update` with an ending status) it reads
the committed row — start, end, status, tokens, cost, the copy that drove it — and emits the
span under the ids `shoal.tracing` derives. Rows are read in one query per kind for whatever
ended while the previous query ran. Only the copy that holds a task's claim emits its spans, so
copies sharing a Redis bus do not emit them twice. Events a lagging subscription missed are
not traced.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import structlog

from shoal.bus.base import Lagged
from shoal.events import Event, EventType
from shoal.protocol import Usage
from shoal.states import TERMINAL_SUBTASK, TERMINAL_TASK
from shoal.store import queries
from shoal.tracing import Tracing, configure, span_id_of, usage_attributes

if TYPE_CHECKING:
    from opentelemetry.util.types import AttributeValue
    from sqlalchemy import Row

    from shoal.api.deps import Services

log = structlog.get_logger(__name__)

CHUNK = 500  # ids per query
REMEMBERED = 10_000  # spans emitted recently, never emitted twice (a reopened subtask)
DRAIN_SECONDS = 10.0  # how long `close` waits for the spans of the last events
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


@dataclass(frozen=True, slots=True)
class _Ended:
    """A task (`subtask` False) or subtask that reached an ending status at `at`."""

    id: uuid.UUID
    subtask: bool
    at: datetime


class TaskTraces:
    """Follows the bus and emits the spans of the tasks and subtasks that end."""

    def __init__(self, services: Services, tracing: Tracing | None, *, owned: bool) -> None:
        self.tracing = tracing
        self._services = services
        self._owned = owned  # configured here, so closed here
        self._ended: list[_Ended] = []
        self._wake = asyncio.Event()
        self._following = True
        self._emitted: dict[uuid.UUID, None] = {}  # insertion-ordered: oldest first
        self._runner: asyncio.Task[None] | None = None

    @classmethod
    async def open(cls, services: Services, tracing: Tracing | None = None) -> TaskTraces:
        """Start tracing into `tracing`, or as the environment asks when it is None; with
        neither, do nothing at all. Subscribed to the bus when this returns."""
        owned = tracing is None
        traces = cls(services, configure("shoal-control-plane") if owned else tracing,
                     owned=owned)
        if traces.tracing is not None:
            subscribed = asyncio.Event()
            traces._runner = asyncio.create_task(traces._run(subscribed), name="shoal-traces")
            await _first(subscribed, traces._runner)
            traces.tracing.propagate()
        return traces

    async def close(self) -> None:
        """After the bus has closed: emit the spans of its last events, then flush (and shut
        down the tracing this opened)."""
        if self.tracing is None:
            return
        self.tracing.stop_propagating()
        if self._runner is not None:
            try:
                await asyncio.wait_for(self._runner, timeout=DRAIN_SECONDS)
            except (TimeoutError, asyncio.CancelledError):
                pass  # the bus did not close: what is left is not traced
            except Exception:  # traces are best effort: never fail a shutdown
                log.warning("traces.failed", exc_info=True)
        await (self.tracing.close() if self._owned else self.tracing.flush())

    async def _run(self, subscribed: asyncio.Event) -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(self._emit_ended())
            try:
                await self._follow(subscribed)
            finally:
                self._following = False
                self._wake.set()

    async def _follow(self, subscribed: asyncio.Event) -> None:
        """Note what ends, until the bus closes."""
        while True:
            try:
                async with self._services.bus.subscribe() as subscription:
                    subscribed.set()
                    async for event in subscription:
                        self._note(event)
                    return
            except Lagged:
                log.warning("traces.lagged", note="spans of the missed events are not emitted")

    def _note(self, event: Event) -> None:
        status = event.data.get("status")
        if event.type is EventType.SUBTASK_UPDATE and status in TERMINAL_SUBTASK:
            self._ended.append(_Ended(uuid.UUID(str(event.data["subtask_id"])), True,
                                      event.timestamp))
        elif (event.type is EventType.TASK_UPDATE and status in TERMINAL_TASK
              and event.task_id is not None):
            self._ended.append(_Ended(event.task_id, False, event.timestamp))
        else:
            return
        self._wake.set()

    async def _emit_ended(self) -> None:
        """Emit the spans of what ended, one read per batch, until following stops."""
        while self._following or self._ended:
            await self._wake.wait()
            self._wake.clear()
            ended, self._ended = self._ended, []
            fresh = [e for e in ended if e.id not in self._emitted]
            for start in range(0, len(fresh), CHUNK):
                try:
                    await self._emit(fresh[start:start + CHUNK])
                except Exception:  # traces are best effort: never stop following
                    log.warning("traces.emit_failed", exc_info=True)

    async def _emit(self, ended: list[_Ended]) -> None:
        at = {e.id: e.at for e in ended}
        task_ids = [e.id for e in ended if not e.subtask]
        subtask_ids = [e.id for e in ended if e.subtask]
        async with self._services.db.connection() as conn:
            task_rows = await queries.traced_tasks(conn, task_ids) if task_ids else []
            subtask_rows = (await queries.traced_subtasks(conn, subtask_ids)
                            if subtask_ids else [])
            usage = (_usage_by_subtask(await queries.attempt_usage(conn, subtask_ids))
                     if subtask_ids else {})
        for row in subtask_rows:
            if self._emits(row):
                self._emit_subtask(row, at[row.id], usage.get(row.id))
        for row in task_rows:
            if self._emits(row):
                self._emit_task(row, at[row.id])

    def _emits(self, row: Row[Any]) -> bool:
        """Whether this copy emits the row's span: it drove the row's task. Noted, so that
        the span is not emitted again."""
        if row.owner_id not in (None, self._services.settings.instance_id):
            return False
        self._emitted[row.id] = None
        if len(self._emitted) > REMEMBERED:
            del self._emitted[next(iter(self._emitted))]
        return True

    def _emit_task(self, row: Row[Any], at: datetime) -> None:
        assert self.tracing is not None
        attributes: dict[str, AttributeValue] = {
            "shoal.task_id": str(row.id), "shoal.workflow": row.workflow,
            "shoal.status": row.status, "gen_ai.usage.input_tokens": row.input_tokens,
            "gen_ai.usage.output_tokens": row.output_tokens, "shoal.cost_usd": row.cost_usd}
        self.tracing.emit(
            "shoal.task", trace_id=row.id.int, span_id=span_id_of(row.id), parent_id=None,
            start=_ns(row.created_at), end=_ns(row.completed_at or at), attributes=attributes,
            error=_error(row.status, row.error, failed=("failed", "budget_exceeded")))

    def _emit_subtask(self, row: Row[Any], at: datetime, usage: Usage | None) -> None:
        assert self.tracing is not None
        attributes: dict[str, AttributeValue] = {
            "shoal.task_id": str(row.task_id), "shoal.subtask_id": str(row.id),
            "shoal.subtask.key": row.key, "shoal.subtask.name": row.name,
            "shoal.role": row.role, "shoal.subtask.kind": row.kind, "shoal.status": row.status,
            "shoal.attempts": row.attempts}
        if row.assigned_tool:
            attributes["shoal.tool"] = row.assigned_tool
        if usage is not None:
            attributes.update(usage_attributes(usage))
        self.tracing.emit(
            "shoal.subtask", trace_id=row.task_id.int, span_id=span_id_of(row.id),
            parent_id=span_id_of(row.task_id), start=_ns(row.started_at or row.created_at),
            end=_ns(row.completed_at or at), attributes=attributes,
            error=_error(row.status, row.error, failed=("failed",)))


async def _first(subscribed: asyncio.Event, runner: asyncio.Task[None]) -> None:
    """Wait until `subscribed` is set, or raise what stopped `runner` before that."""
    waiting = asyncio.create_task(subscribed.wait())
    await asyncio.wait({waiting, runner}, return_when=asyncio.FIRST_COMPLETED)
    if not subscribed.is_set():
        waiting.cancel()
        runner.result()


def _usage_by_subtask(rows: list[Row[Any]]) -> dict[uuid.UUID, Usage]:
    """The tokens and cost of each subtask's attempts, summed."""
    sums: dict[uuid.UUID, list[float]] = {}
    for row in rows:
        used = row.usage or {}
        total = sums.setdefault(row.subtask_id, [0, 0, 0.0])
        total[0] += int(used.get("input_tokens") or 0)
        total[1] += int(used.get("output_tokens") or 0)
        total[2] += float(used.get("cost_usd") or 0.0)
    return {sid: Usage.model_construct(input_tokens=int(t[0]), output_tokens=int(t[1]),
                                       cost_usd=round(t[2], 6)) for sid, t in sums.items()}


def _error(status: str, error: str | None, *, failed: tuple[str, ...]) -> str | None:
    return (error or status) if status in failed else None


def _ns(moment: datetime) -> int:
    """Nanoseconds since the epoch (a naive time is UTC, as the store keeps it)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (moment - _EPOCH) // _MICROSECOND * 1000

