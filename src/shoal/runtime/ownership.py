"""Which unfinished tasks this control-plane copy drives: its claims, kept alive and given up.

Copies sharing one database each drive only the tasks they hold a claim on (`store/claims.py`).
A copy claims at start-up what nobody else holds; every `claim_interval` it renews its claims
and takes over the tasks of copies that stopped renewing theirs (`claim_ttl`), inside a batch's
transaction; it releases its claims when it stops gracefully, so that another copy takes them
over at its next renewal instead of after `claim_ttl`. A command for a task another live copy
holds raises `OwnedElsewhere` (`task_owned_elsewhere`, naming that copy), which the runtime
forwards to it (`forwarding.py`); routing work to workers connected elsewhere is still to come.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import time
import uuid
from collections.abc import Awaitable, Callable, Collection, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
import structlog
from sqlalchemy import Connection as SyncConnection
from sqlalchemy.ext.asyncio import AsyncConnection

from shoal.config import Settings
from shoal.engine.model import TaskState
from shoal.errors import Conflict, NotFound, ShoalError, Unavailable
from shoal.protocol import ResendResults
from shoal.runtime.batch import Batch
from shoal.runtime.dispatch import cancel_message
from shoal.runtime.fleet import Fleet
from shoal.runtime.jobs import AdoptTasks, Claims, Job, ReleaseTasks
from shoal.runtime.memory import TaskMemory
from shoal.store.claims import Claim, claim_of, claim_tasks, release_claims, renew_claims
from shoal.store.db import Database
from shoal.store.state import load_task_states

log = structlog.get_logger(__name__)

NAME_LOCK_WAIT = 10.0  # seconds a starting copy waits for its name to be free (PostgreSQL)
NAME_LOCK_POLL = 0.2

Opener = Callable[[], Awaitable[AsyncConnection]]  # the batch's read connection, opened on use


@dataclass(frozen=True, slots=True)
class Renewal:
    """What one renewal changed: tasks another copy took over, and tasks this copy took."""

    lost: frozenset[uuid.UUID]
    taken: frozenset[uuid.UUID]


class Ownership:
    """This copy's claims on unfinished tasks, and the memory of the tasks it holds."""

    def __init__(self, settings: Settings, db: Database, memory: TaskMemory, fleet: Fleet) -> None:
        self.owner = settings.instance_id
        self._ttl = settings.claim_ttl
        self._interval = settings.claim_interval
        self._grace = timedelta(seconds=settings.lease_seconds)
        self._db = db
        self._memory = memory
        self._fleet = fleet
        digest = hashlib.sha256(f"shoal-instance:{self.owner}".encode()).digest()
        self._name_key = int.from_bytes(digest[:8], "big", signed=True)
        self._name_conn: AsyncConnection | None = None  # holds the name lock (PostgreSQL)

    def expires_at(self, now: datetime) -> datetime:
        """When a claim made at `now` runs out."""
        return now + timedelta(seconds=self._ttl)

    async def claim_at_start(self, now: datetime) -> list[uuid.UUID]:
        """Claim every unfinished task no live copy holds (this copy's own from before too)."""
        await self._hold_name()
        return await self._db.run_write(self._claim(now))

    async def _hold_name(self) -> None:
        """On PostgreSQL, hold a session lock named after this copy for as long as it runs, so
        that a second copy started under the same id stops with a clear error instead of
        driving the same tasks. The server frees the lock of a copy that died as soon as it
        sees the connection close; a copy restarted at once waits a moment for that."""
        if not self._db.is_postgres:
            return
        conn = await self._db.engine.connect()
        try:
            await conn.execution_options(isolation_level="AUTOCOMMIT")
            held = await self._try_name_lock(conn)
        except BaseException:
            await conn.close()
            raise
        if not held:
            await conn.close()
            raise Conflict(
                f"Another control-plane copy is running as instance {self.owner!r} on this "
                "database. Give each copy its own SHOAL_INSTANCE_ID (or its own SHOAL_DATA_DIR, "
                "from which the default id is made).",
                code="instance_id_in_use", details={"instance_id": self.owner})
        self._name_conn = conn

    async def _try_name_lock(self, conn: AsyncConnection) -> bool:
        """Take the name lock, retrying for up to NAME_LOCK_WAIT seconds."""
        deadline = asyncio.get_running_loop().time() + NAME_LOCK_WAIT
        while not (await conn.execute(sa.text("SELECT pg_try_advisory_lock(:k)"),
                                      {"k": self._name_key})).scalar():
            if asyncio.get_running_loop().time() > deadline:
                return False
            await asyncio.sleep(NAME_LOCK_POLL)
        return True

    async def _let_go_of_name(self) -> None:
        conn, self._name_conn = self._name_conn, None
        if conn is None:
            return
        try:
            await conn.execute(sa.text("SELECT pg_advisory_unlock(:k)"), {"k": self._name_key})
        except Exception as exc:  # closing the connection frees it as well
            log.info("runtime.name_lock_not_released", owner=self.owner, error=str(exc))
        finally:
            await conn.close()

    async def abandon(self) -> None:
        """Close the name lock's connection if the copy still holds it (its runtime was
        cancelled, as a crash stops it): the server frees the lock with the connection, as it
        does a crashed copy's, and the claims stay until they expire."""
        conn, self._name_conn = self._name_conn, None
        if conn is not None:
            await conn.close()

    def install(self, states: Iterable[TaskState], now: datetime) -> None:
        """Drive claimed `states` from memory; their live attempts get a grace lease in which
        their workers can report back (and count against the slots of those connected here)."""
        grace = now + self._grace
        for st in states:
            self._memory.remember(st)
            for aid, att in st.attempts.items():
                self._memory.leases[aid] = grace
                wc = self._fleet.get(att.worker_id)
                if wc is not None:
                    wc.running.add(aid)

    async def keep(self, call: Callable[[Job], Awaitable[Any]],
                   post: Callable[[Job], None],
                   clock: Callable[[], float] = time.monotonic) -> None:
        """Every `claim_interval`, renew and claim through the loop (a `Claims` job); hand the
        tasks taken over to an `AdoptTasks` job and the tasks lost to a `ReleaseTasks` job.

        A renewal late by more than half the margin `claim_ttl` leaves after `claim_interval`
        is logged (`runtime.claims_renewed_late`, with the seconds since the one before): the
        loop or the process stalled, and a stall of the whole margin hands this copy's tasks
        to another copy."""
        late_after = self._interval + (self._ttl - self._interval) / 2
        renewed = clock()
        while True:
            await asyncio.sleep(self._interval)
            try:
                renewal: Renewal = await call(Claims())
            except ShoalError as exc:
                if exc.code == "shutting_down":
                    return
                log.warning("runtime.claims_not_renewed", owner=self.owner, error=exc.message)
                continue
            last, renewed = renewed, clock()
            if renewed - last > late_after:
                log.warning("runtime.claims_renewed_late", owner=self.owner,
                            seconds=round(renewed - last, 2), claim_ttl=self._ttl)
            if renewal.lost:
                post(ReleaseTasks(renewal.lost))
            if renewal.taken:
                post(AdoptTasks(renewal.taken))

    def renew_in(self, b: Batch) -> Callable[[], Renewal]:
        """Renew this copy's claims and claim orphaned tasks in `b`'s transaction (so that no
        second transaction of this copy waits on the batch's row locks); after the commit, the
        returned function says what changed."""
        known = frozenset(self._memory.states)
        found: dict[str, frozenset[uuid.UUID]] = {}
        claim = self._claim(b.now)

        def step(conn: SyncConnection) -> None:
            found["held"] = frozenset(
                renew_claims(conn, self.owner, now=b.now, ttl=self._ttl))
            found["claimed"] = frozenset(claim(conn))

        b.sql.append(step)
        return lambda: Renewal(lost=known - found["held"], taken=found["claimed"] - known)

    async def adopt(self, opener: Opener, b: Batch, task_ids: Collection[uuid.UUID]) -> None:
        """Load and drive the tasks this copy has just taken over."""
        fresh = [t for t in task_ids if t not in self._memory.states and t not in b.works]
        if not fresh:
            return
        states = await load_task_states(await opener(), fresh)
        self.install(states, b.now)
        self._ask_for_results(b, states)
        log.info("runtime.tasks_taken_over", owner=self.owner, tasks=len(states),
                 live_attempts=sum(len(st.attempts) for st in states))

    def _ask_for_results(self, b: Batch, states: Iterable[TaskState]) -> None:
        """Ask the workers of the tasks' live attempts, wherever they are connected, to send
        again what they finished and still hold: its first copy may have gone to the copy that
        died, and a live worker's finished work is not done twice."""
        by_worker: dict[uuid.UUID, list[uuid.UUID]] = {}
        for st in states:
            for aid, att in st.attempts.items():
                if att.worker_id is not None:
                    by_worker.setdefault(att.worker_id, []).append(aid)
        for worker_id, aids in by_worker.items():
            wc = self._fleet.get(worker_id)
            if wc is not None and "resend" in wc.features:
                b.messages.append((wc, ResendResults(attempt_ids=aids).model_dump_json()))
                log.info("runtime.results_asked", worker=str(worker_id), attempts=len(aids))

    def drop(self, b: Batch, task_ids: Collection[uuid.UUID]) -> None:
        """Stop driving tasks another copy took over; stop their attempts on workers here
        (their results could not be accepted: the new owner re-runs them)."""
        for tid in task_ids:
            st = self._memory.states.get(tid)
            if st is None:
                continue  # it ended meanwhile
            log.warning("runtime.task_lost", task_id=str(tid), owner=self.owner,
                        reason="this copy's claim ran out and another copy took the task over")
            for aid, att in st.attempts.items():
                wc = self._fleet.get(att.worker_id)
                if wc is not None and aid in wc.running:
                    wc.running.discard(aid)
                    b.messages.append((wc, cancel_message(aid, "another control plane took over")))
            self._memory.drop(tid)

    async def take(self, opener: Opener, task_id: uuid.UUID, now: datetime) -> TaskState:
        """The state of a task memory does not hold, claimed first if it is unfinished.

        Raises `NotFound` for an unknown task and `Unavailable` (`task_owned_elsewhere`) when
        another live copy holds it.
        """
        conn = await opener()
        claim = await conn.run_sync(claim_of, task_id)
        if claim is None:
            raise NotFound(f"No task {task_id}.", details={"task_id": str(task_id)})
        if claim.held_by_other(self.owner, now):
            raise _owned_elsewhere(claim, now)
        if not claim.finished:
            taken = await self._db.run_write(self._claim(now, [task_id]))
            if task_id not in taken:  # another copy claimed it a moment ago
                raise _owned_elsewhere(claim, now)
        loaded = await load_task_states(conn, [task_id])
        if not loaded:
            raise NotFound(f"No task {task_id}.", details={"task_id": str(task_id)})
        if not claim.finished:
            self.install(loaded, now)
        return loaded[0]

    async def release(self) -> None:
        """Give up every claim (graceful stop): other copies take the tasks over at once."""
        try:
            count = await self._db.run_write(functools.partial(release_claims, owner=self.owner))
        except Exception as exc:  # the store is unreachable: the claims run out by themselves
            log.warning("runtime.claims_not_released", owner=self.owner, error=str(exc))
        else:
            log.info("runtime.claims_released", owner=self.owner, tasks=count)
        await self._let_go_of_name()

    def _claim(
        self, now: datetime, task_ids: Collection[uuid.UUID] | None = None
    ) -> Callable[[SyncConnection], list[uuid.UUID]]:
        return functools.partial(claim_tasks, owner=self.owner, now=now, ttl=self._ttl,
                                 task_ids=task_ids)


class OwnedElsewhere(Unavailable):
    """A live copy other than this one holds the task (`owner`): only it may decide it."""

    def __init__(self, message: str, *, owner: str, retry_after: float,
                 details: dict[str, str]) -> None:
        super().__init__(message, retry_after=retry_after, code="task_owned_elsewhere",
                         details=details)
        self.owner = owner


def _owned_elsewhere(claim: Claim, now: datetime) -> OwnedElsewhere:
    wait = 1.0
    if claim.expires_at is not None:
        wait = max(wait, (claim.expires_at - now).total_seconds())
    return OwnedElsewhere(
        f"Task {claim.task_id} is being run by another control-plane copy, and only that copy "
        f"can change it. Retry in {wait:.0f} s: the retry may reach that copy, and if that copy "
        "has stopped, this one takes the task over.",
        owner=claim.owner or "", retry_after=wait, details={"task_id": str(claim.task_id)},
    )
