"""The file sweeper: stored files no row refers to any more (their task was deleted) are
removed, a while after they were last stored, so that a file being stored again for another
task at that moment is never lost.

Work comes from `file_sweep` rows, written in the transaction that deleted the rows; a row
goes only once its file is gone or found in use again, so a crash half-way is finished by
the next round. Several copies may sweep at once: the file operations tolerate each other.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta

import sqlalchemy as sa
import structlog

from shoal.artifacts.store import ArtifactStore, remove_unless_recent
from shoal.store import deletion
from shoal.store.db import Database
from shoal.store.models import utcnow

log = structlog.get_logger(__name__)
ROUND = 500  # hashes looked at per round


class FileSweeper:
    """Removes unreferenced stored files every `interval` seconds, or soon after `nudge`."""

    def __init__(self, db: Database, store: ArtifactStore, *, grace: float,
                 interval: float) -> None:
        self._db, self._store = db, store
        self._grace, self._interval = grace, interval
        self._wake = asyncio.Event()

    def nudge(self) -> None:
        """Rows were deleted: sweep now rather than at the next interval."""
        self._wake.set()

    async def run(self) -> None:
        """Sweep until cancelled; a round that fails is logged and tried again later."""
        while True:
            # `asyncio.timeout`, not `wait_for`: on Python 3.11 `wait_for` can swallow a
            # cancellation that comes as the wait ends, and the sweeper would never stop.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._interval):
                    await self._wake.wait()
            self._wake.clear()
            try:
                while await self.sweep_once() == ROUND:
                    pass
            except Exception as exc:  # the store is away: the rows wait for the next round
                log.warning("files.sweep_failed", error=str(exc))

    async def sweep_once(self) -> int:
        """One round: how many queued hashes it looked at."""
        now = utcnow()
        candidates = await self._db.run_write(
            lambda conn: deletion.sweep_candidates(conn, limit=ROUND))
        if not candidates:
            return 0
        used = await self._db.run_write(lambda conn: deletion.still_used(conn, candidates))
        removed: list[str] = []
        recent: list[str] = []
        for sha in (h for h in candidates if h not in used):
            gone = await asyncio.to_thread(remove_unless_recent, self._store, sha,
                                           grace=self._grace)
            (removed if gone else recent).append(sha)

        def settle(conn: sa.Connection) -> None:
            deletion.swept(conn, [*used, *removed])
            deletion.requeue(conn, recent, now=now, after=timedelta(seconds=self._grace))

        await self._db.run_write(settle)
        if removed:
            log.info("files.swept", removed=len(removed), kept_in_use=len(used),
                     too_recent=len(recent))
        return len(candidates)
