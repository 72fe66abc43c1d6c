"""People's commands for a task (cancel; approve, reject, correct or answer a checkpoint),
decided by this copy when it drives the task, else by the copy that does (ADR 0038)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from shoal.config import Settings
from shoal.engine.model import TaskRecord
from shoal.errors import NotFound, ShoalError, Unavailable
from shoal.runtime.forwarding import WAIT, Answer, Command, Forwarder
from shoal.runtime.jobs import Cancel, DecideCheckpoint, Job
from shoal.runtime.ownership import OwnedElsewhere
from shoal.store import queries
from shoal.store.convert import task_from_row
from shoal.store.db import Database


class Commands:
    """Where a command is decided: through this copy's loop (`call`), or forwarded."""

    def __init__(self, settings: Settings, db: Database, forwarder: Forwarder | None,
                 call: Callable[[Job], Awaitable[Any]]) -> None:
        self._settings = settings
        self._db = db
        self._forwarder = forwarder
        self._call = call

    async def decide(self, command: Command) -> TaskRecord:
        """Decide `command` here, or, for a task another live copy drives, have that copy
        decide it (`forwarding`); a copy that does not answer is waited out until its claim
        expires, then this copy takes the task over. `OwnedElsewhere` only without a way to
        reach other copies (no Redis), or past that wait."""
        loop = asyncio.get_running_loop()
        give_up = loop.time() + self._settings.claim_ttl + self._settings.claim_interval + WAIT
        while True:
            try:
                result: TaskRecord = await self._call(job_of(command))
            except OwnedElsewhere as exc:
                if self._forwarder is None or loop.time() > give_up:
                    raise
                owner, wait = exc.owner, exc.retry_after or 1.0
            else:
                return result
            answer = await self._forwarder.send(owner, command, within=WAIT)
            refused = answer.error if answer is not None else None
            if answer is not None and refused is None:
                return await self._stored_task(command)
            if refused is not None and not isinstance(refused, Unavailable):
                raise refused  # the owner's own refusal: 404, 409, 422 …
            # No answer (or the owner is stopping): its claim runs out, then this copy decides.
            await asyncio.sleep(min(max(wait, 0.2), max(give_up - loop.time(), 0.0)))

    async def answer(self, command: Command) -> Answer:
        """Decide a command another copy received for a task this copy drives."""
        try:
            await self._call(job_of(command))
        except ShoalError as exc:
            return Answer(exc)
        return Answer()

    async def _stored_task(self, command: Command) -> TaskRecord:
        """The task as the copy that decided `command` stored it."""
        async with self._db.connection() as conn:
            row = await queries.get_task(conn, command.task_id, user_id=command.user_id)
        if row is None:
            raise NotFound(f"No task {command.task_id}.",
                           details={"task_id": str(command.task_id)})
        return task_from_row(row)


def job_of(command: Command) -> Cancel | DecideCheckpoint:
    """The loop's job for a command."""
    if command.decision is None:
        return Cancel(command.task_id, command.user_id)
    return DecideCheckpoint(command.task_id, command.user_id, command.decision)
