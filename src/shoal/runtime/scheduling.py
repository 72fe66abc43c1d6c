"""Placing ready subtasks on free worker slots, longest remaining path first (seed 004 §3.2.1).

Runs inside a batch, after the batch's jobs were decided and before it commits: the attempts
it creates are written in the same transaction as the decisions that made their subtasks ready.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any

from shoal.config import Settings
from shoal.engine.allocation import SubtaskDemand, allocate, unplaceable_reason
from shoal.engine.inputs import DispatchedAll, EngineInput, Unplaceable
from shoal.engine.model import QUALITY_KINDS, AttemptRecord
from shoal.engine.step import Context
from shoal.events import EventType, NewEvent
from shoal.ids import new_ordered_id
from shoal.runtime.batch import Batch, TaskWork
from shoal.runtime.fleet import Connection, Fleet
from shoal.runtime.memory import TaskMemory
from shoal.states import PAUSED_TASK, TERMINAL_TASK, AttemptStatus, SubtaskStatus

Decide = Callable[[Batch, TaskWork, EngineInput, Context], None]


class Scheduler:
    """Turns queued subtasks into dispatched attempts on this control plane's workers."""

    def __init__(self, settings: Settings, fleet: Fleet, memory: TaskMemory,
                 decide: Decide) -> None:
        self.settings = settings
        self.fleet = fleet
        self.memory = memory
        self._decide = decide

    def schedule(self, b: Batch, ctx: Context) -> None:
        """Place ready subtasks on free slots, longest remaining path first: on workers
        connected here, then on those connected to other copies (ADR 0039), and on a silent
        worker (an attempt's lease ran out on it) only what no worker heard from could run."""
        free = [c for c in self.fleet.connections() if c.free()]
        demands, where = self._demands(b)
        if not demands:
            return
        if not free:
            self._warn_unplaceable(b, demands, where, ctx)
            return
        heard = [c for c in free if not c.silent]
        here = [c for c in heard if c.via is None]
        if len(here) < len(heard):
            demands = self._place(b, demands, where, here, ctx)
            heard = [c for c in heard if c.via is not None]
        demands = self._place(b, demands, where, heard, ctx)
        silent = [c for c in free if c.silent]
        if demands and silent:  # what a worker heard from could run waits for it
            views = [c.view() for c in self.fleet.connections() if not c.silent]
            waits = [d for d in demands if unplaceable_reason(d, views) is None]
            demands = waits + self._place(b, [d for d in demands if d not in waits], where,
                                          silent, ctx)
        self._warn_unplaceable(b, demands, where, ctx)

    def _place(self, b: Batch, demands: list[SubtaskDemand], where: dict[uuid.UUID, uuid.UUID],
               free: list[Connection], ctx: Context) -> list[SubtaskDemand]:
        """Place what fits on `free`; returns the demands left unplaced."""
        if not demands or not free:
            return demands
        by_worker = {c.worker_id: c for c in free}
        lease = b.now + timedelta(seconds=self.settings.lease_seconds)
        run: list[tuple[Connection, AttemptRecord]] = []  # consecutive placements of one task
        for a in allocate(demands, [c.view() for c in free]):
            tid = where[a.subtask_id]
            if run and run[0][1].task_id != tid:
                self._dispatch(b, run, ctx)
                run = []
            work = self._work(b, tid)
            sub = work.state.subtasks[a.subtask_id]
            run.append((by_worker[a.worker_id], AttemptRecord(
                id=new_ordered_id(), subtask_id=sub.id, task_id=tid, worker_id=a.worker_id,
                fence=sub.attempts + sub.declines + 1, tool=a.tool, status=AttemptStatus.DISPATCHED,
                dispatched_at=b.now, lease_expires_at=lease)))
        if run:
            self._dispatch(b, run, ctx)
        placed = {att.subtask_id for _, att in b.dispatches}
        return [d for d in demands if d.subtask_id not in placed]

    def _work(self, b: Batch, tid: uuid.UUID) -> TaskWork:
        return b.works.get(tid) or b.works.setdefault(tid, TaskWork(self.memory.states[tid]))

    def _dispatch(
        self, b: Batch, run: list[tuple[Connection, AttemptRecord]], ctx: Context
    ) -> None:
        """Decide the attempts of one task in one decision (the same as one each, in order)."""
        tid = run[0][1].task_id
        self._decide(b, b.works[tid], DispatchedAll(tuple(att for _, att in run)), ctx)
        for wc, att in run:
            wc.running.add(att.id)
            b.reserved.append((wc, att.id))
            b.dispatches.append((wc, att))

    def _demands(self, b: Batch) -> tuple[list[SubtaskDemand], dict[uuid.UUID, uuid.UUID]]:
        candidates = dict(self.memory.queued)
        for tid, w in b.works.items():
            for sid in (*w.merged.new_subtasks, *w.merged.changed_subtasks):
                candidates[sid] = tid
        demands, where = [], {}
        for sid, tid in candidates.items():
            work = b.works.get(tid)
            state = work.state if work else self.memory.states.get(tid)
            sub = state.subtasks.get(sid) if state else None
            if state is None or sub is None or sub.status is not SubtaskStatus.QUEUED:
                continue
            if state.task.status in TERMINAL_TASK or (sub.not_before and sub.not_before > b.now):
                continue
            if state.task.status in PAUSED_TASK:
                continue  # paused for a person: nothing new starts
            where[sid] = tid
            opts = sub.options  # its worker options are rarely set: tested here, not by a call
            demands.append(SubtaskDemand(
                subtask_id=sid, priority=sub.priority, pinned_tool=sub.pinned_tool,
                recommended_tool=sub.recommended_tool,
                tool_preferences=state.task.tool_preferences, sensitive=state.task.sensitive,
                default_tool=self.settings.default_tool,
                exclude_workers=_ids(opts.exclude_workers) if opts.exclude_workers else _NONE,
                pinned_worker=_id(opts.pinned_worker) if opts.pinned_worker else None,
                prefer_worker=_id(opts.prefer_worker) if opts.prefer_worker else None))
        return demands, where

    def _warn_unplaceable(
        self, b: Batch, demands: list[SubtaskDemand], where: dict[uuid.UUID, uuid.UUID],
        ctx: Context,
    ) -> None:
        if not demands:  # the common case: everything ready was placed
            return
        views = [c.view() for c in self.fleet.connections()]
        for d in demands:
            if d.subtask_id in self.memory.warned:
                continue
            reason = (unplaceable_reason(d, views) if views else
                      "No worker is online. Start one with: shoal worker --server "
                      f"{self.settings.base_url} --token <token from `shoal token create`>")
            if reason is None:
                continue
            tid = where[d.subtask_id]
            state = b.works[tid].state if tid in b.works else self.memory.states[tid]
            sub = state.subtasks[d.subtask_id]
            if views and sub.kind in QUALITY_KINDS:  # a quality step must not stall the task
                peer = unplaceable_reason(replace(d, exclude_workers=frozenset()), views) is None
                self._decide(b, self._work(b, tid), Unplaceable(d.subtask_id, peer=peer), ctx)
                continue
            self.memory.warned.add(d.subtask_id)
            b.events.append(NewEvent(EventType.NOTICE, {
                "task_id": str(state.task.id), "subtask_id": str(d.subtask_id),
                "level": "warning", "message": reason}, task_id=state.task.id,
                user_id=state.task.user_id))


def _ids(values: Any) -> frozenset[uuid.UUID]:
    """The UUIDs in a list of strings (from subtask options); others are skipped."""
    if not values:  # the common case, on every step
        return _NONE
    return frozenset(found for value in values if (found := _id(value)) is not None)


def _id(value: Any) -> uuid.UUID | None:
    """The UUID a subtask option names, or None (absent, or not a UUID)."""
    if not value:
        return None
    try:
        return uuid.UUID(str(value))
    except (ValueError, TypeError, AttributeError):
        return None


_NONE: frozenset[uuid.UUID] = frozenset()
