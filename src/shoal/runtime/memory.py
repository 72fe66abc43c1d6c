"""What the runtime holds in memory about unfinished tasks, and the indexes kept in step with it.

The store is the source of truth; this is a cache of committed state that the decision loop
reads instead of the database. It changes only through `remember` (a committed state) and
`forget` (a task that ended or must be reloaded).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

from shoal.engine.model import TaskState
from shoal.runtime.batch import TaskWork
from shoal.states import TERMINAL_TASK, AttemptStatus, SubtaskStatus


class TaskMemory:
    """Committed state of the unfinished tasks this control plane drives."""

    def __init__(self, clock: Callable[[], datetime]) -> None:
        self._clock = clock
        self.states: dict[uuid.UUID, TaskState] = {}
        self.attempt_task: dict[uuid.UUID, uuid.UUID] = {}  # live attempt → task
        self.leases: dict[uuid.UUID, datetime] = {}  # live attempt → lease expiry
        self.queued: dict[uuid.UUID, uuid.UUID] = {}  # queued subtask → task
        self.with_files: set[uuid.UUID] = set()  # tasks some subtask of which has files
        self.warned: set[uuid.UUID] = set()  # subtasks already reported as unplaceable
        # A live attempt's id by its number: a worker's message carries its own copy of the
        # id, which the runtime swaps for its own (looked up here by the number, no Python
        # call), so that every dict and set holding it finds it by identity (comparing two
        # UUIDs that are not the same object is two Python calls, and hashing a plain one two).
        self.attempt_ids: dict[int, uuid.UUID] = {}

    def remember(self, st: TaskState, work: TaskWork | None = None) -> None:
        """Install a committed state and keep the indexes in step."""
        tid = st.task.id
        if work is not None:  # (`in` and `del` here, not `pop`: operators are not calls)
            attempt_task, attempt_ids, leases = self.attempt_task, self.attempt_ids, self.leases
            for aid, att in work.merged.changed_attempts.items():
                if att.status in (AttemptStatus.DISPATCHED, AttemptStatus.RUNNING):
                    attempt_task[aid] = tid
                    attempt_ids[aid.int] = aid
                    if aid not in leases:
                        leases[aid] = att.lease_expires_at or self._clock()
                else:
                    if aid in attempt_task:
                        del attempt_task[aid]
                    if aid.int in attempt_ids:
                        del attempt_ids[aid.int]
                    if aid in leases:
                        del leases[aid]
        else:
            for aid in st.attempts:
                self.attempt_task[aid] = tid
                self.attempt_ids[aid.int] = aid
        # A subtask's status changes only through a decision, which names it; so a state this
        # memory already held needs only the subtasks the batch touched re-indexed.
        touched: Any = st.subtasks
        if work is not None and tid in self.states and st.task.status not in TERMINAL_TASK:
            touched = {sid: st.subtasks[sid] for sid in
                       (*work.merged.new_subtasks, *work.merged.changed_subtasks)}
        queued, warned = self.queued, self.warned
        for sid, sub in touched.items():
            output = sub.output  # `has_files`, inline: this runs for every subtask changed
            if output and output.files:
                self.with_files.add(tid)
            if sub.status is SubtaskStatus.QUEUED:
                queued[sid] = tid
            else:
                if sid in queued:
                    del queued[sid]
                if warned:  # (rarely any: a UUID's hash is two calls)
                    warned.discard(sid)
        if st.task.status in TERMINAL_TASK:
            self.drop(tid)
        else:
            self.states[tid] = st

    def drop(self, tid: uuid.UUID) -> None:
        """Forget a task and everything indexed under it."""
        self.with_files.discard(tid)
        st = self.states.pop(tid, None)
        if st is None:
            return
        for aid in st.attempts:
            self.attempt_task.pop(aid, None)
            self.attempt_ids.pop(aid.int, None)
            self.leases.pop(aid, None)
        for sid in st.subtasks:
            self.queued.pop(sid, None)

    def counts(self) -> dict[str, int]:
        """Small numbers for health and metrics."""
        return {"active_tasks": len(self.states), "queued": len(self.queued),
                "live_attempts": len(self.attempt_task)}
