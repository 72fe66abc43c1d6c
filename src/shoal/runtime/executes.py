"""Sending the attempts a commit dispatched: each attempt's `execute_task` frame, with what its
worker needs (the user's guidance, the search indexes of the task's sources), grouped per
worker."""

from __future__ import annotations

import uuid

import structlog

from shoal.artifacts.store import ArtifactStore
from shoal.config import Settings
from shoal.engine.model import AttemptRecord, TaskState
from shoal.errors import ShoalError
from shoal.protocol import BATCH_BYTES
from shoal.runtime.dispatch import execute_message, send_grouped
from shoal.runtime.fleet import Connection
from shoal.runtime.memory import TaskMemory
from shoal.store import files as file_rows
from shoal.store import queries
from shoal.store.db import Database

log = structlog.get_logger(__name__)
# Messages of one commit's dispatch made before the first of them go out (ADR 0054): a dispatch
# of at most this many goes out in one go once all are made; a larger one in growing parts.
FIRST_SEND = 32


class Executes:
    """The `execute_task` frames of freshly dispatched attempts, built and sent after the
    commit that dispatched them."""

    def __init__(self, settings: Settings, db: Database, artifacts: ArtifactStore,
                 memory: TaskMemory) -> None:
        self._settings = settings
        self._db = db
        self._artifacts = artifacts
        self._memory = memory
        self._guidance: dict[uuid.UUID, list[str]] = {}  # user → apply-to-future guidance

    def forget_guidance(self, user_id: uuid.UUID) -> None:
        """`user_id`'s guidance changed: read it again before the next attempt."""
        self._guidance.pop(user_id, None)

    async def send(self, dispatches: list[tuple[Connection, AttemptRecord]]) -> None:
        """Send each dispatched attempt to its worker (grouped per worker, in order).

        A large dispatch goes out while its messages are made: the first FIRST_SEND of them,
        then parts each twice the one before (ADR 0054). The workers start on the
        first attempts while the control plane makes the rest, instead of waiting for all of
        them, at the cost of a few more frames (about log2 of the attempts ÷ FIRST_SEND).
        """
        limit = min(BATCH_BYTES, self._settings.max_result_bytes)
        ready: list[tuple[Connection, str]] = []
        due = FIRST_SEND
        for wc, att in dispatches:
            text = await self._text(wc, att)
            if text is None:
                continue
            ready.append((wc, text))
            if len(ready) == due:
                await send_grouped(ready, "execute_tasks", "tasks", limit)
                ready, due = [], due * 2
        if ready:
            await send_grouped(ready, "execute_tasks", "tasks", limit)

    async def _text(self, wc: Connection, att: AttemptRecord) -> str | None:
        state = self._memory.states.get(att.task_id)
        if state is None:
            return None
        try:
            guidance = await self._user_guidance(state.task.user_id)
            caches = await self._index_caches(state) if state.task.meta.sources else []
            return await execute_message(state, att, settings=self._settings,
                                         artifacts=self._artifacts, tools=sorted(wc.tools),
                                         guidance=guidance,
                                         files_possible=att.task_id in self._memory.with_files,
                                         caches=caches)
        except ShoalError as exc:  # e.g. an upstream file is missing: the lease retries it
            log.warning("runtime.dispatch_failed", attempt=str(att.id), error=exc.message)
            return None

    async def _index_caches(self, state: TaskState) -> list[tuple[str, str, int]]:
        """The search indexes the user's tasks made of this task's sources (`.index/` files),
        handed to the worker so that it need not build them again."""
        shas = [h for s in state.task.meta.sources for h in (s.sha256, s.text_sha256) if h]
        async with self._db.connection() as conn:
            rows = await file_rows.index_caches(conn, state.task.user_id, shas)
        return [(r.path, r.sha256, int(r.size)) for r in rows]

    async def _user_guidance(self, user_id: uuid.UUID) -> list[str]:
        """The guidance `user_id` asked to apply to future subtasks (cached)."""
        known = self._guidance.get(user_id)
        if known is None:
            async with self._db.connection() as conn:
                known = await queries.active_guidance(conn, user_id)
            self._guidance[user_id] = known
        return known
