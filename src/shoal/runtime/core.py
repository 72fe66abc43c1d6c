"""The runtime loop: load state, call the engine, persist and append events in ONE transaction,
then dispatch commands and publish events.

Every change goes through one inbox. The loop drains what is waiting (up to `batch_max`),
decides each job against in-memory task state, lets the scheduler place ready subtasks on free
worker slots, and commits the lot at once (group commit). Only after the commit are futures
resolved, messages sent to workers and events published, so nothing anyone sees can be lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

import structlog

from shoal.artifacts.store import ArtifactStore
from shoal.bus.base import EventBus
from shoal.config import Settings
from shoal.engine import planning
from shoal.engine.inputs import (
    BudgetCheck,
    CancelRequested,
    CheckpointDecision,
    CheckpointExpired,
    EngineInput,
    Expired,
    Queued,
    Start,
    UsageReported,
)
from shoal.engine.model import TaskRecord, TaskState
from shoal.engine.retry import RetryPolicy
from shoal.engine.step import Context
from shoal.errors import NotFound, ShoalError, StaleAttempt, Unavailable
from shoal.events import Event, EventType, NewEvent
from shoal.mailbox import UNBOUNDED, Mailbox
from shoal.metrics import Metrics
from shoal.protocol import (
    AgentLog,
    AgentTokens,
    AttemptUsage,
    Heartbeat,
    TaskAccepted,
    TaskResult,
    WorkerMessage,
    WorkerRegister,
)
from shoal.runtime.admission import Admission
from shoal.runtime.batch import Batch, Reader, TaskWork
from shoal.runtime.commands import Commands
from shoal.runtime.dispatch import (
    PendingAcks,
    cancel_message,
    send_to,
)
from shoal.runtime.executes import Executes
from shoal.runtime.file_sweep import FileSweeper
from shoal.runtime.fleet import Connection, Fleet
from shoal.runtime.forwarding import Command, Forwarder
from shoal.runtime.jobs import (
    Accepted,
    Admit,
    AdoptTasks,
    Beat,
    Cancel,
    Claims,
    DecideCheckpoint,
    Decline,
    Disconnect,
    Forget,
    Hold,
    Job,
    Log,
    Register,
    ReleaseTasks,
    Result,
    Spent,
    Submit,
    Tick,
    Wake,
    sweep,
)
from shoal.runtime.memory import TaskMemory
from shoal.runtime.ownership import Ownership
from shoal.runtime.peers import Peers
from shoal.runtime.relay import Relay
from shoal.runtime.scheduling import Scheduler
from shoal.runtime.tokens import TokenRelay
from shoal.runtime.worker_jobs import WorkerJobs
from shoal.store import uploads
from shoal.store import workers as worker_rows
from shoal.store.db import Database, lost_a_race
from shoal.store.models import utcnow
from shoal.store.state import load_task_states
from shoal.workflows import decide

log = structlog.get_logger(__name__)
MAX_RACES = 5  # times a job alone is decided again after another copy's commit beat it
STORE_OUTAGE = 300.0  # seconds the runtime waits for its store to answer again before it stops


class Runtime:
    """Owns the decision loop, the lease sweeper and the connected fleet of one control plane."""

    def __init__(
        self, settings: Settings, db: Database, bus: EventBus, artifacts: ArtifactStore, *,
        clock: Callable[[], datetime] = utcnow, rand: Callable[[], float] = random.random,
        metrics: Metrics | None = None, forwarder: Forwarder | None = None,
        relay: Relay | None = None,
    ) -> None:
        self.settings = settings
        self.db = db
        self.bus = bus
        self.artifacts = artifacts
        self.fleet = Fleet()
        self._clock = clock
        self._rand = rand
        self._retry = RetryPolicy(max_attempts=settings.max_attempts,
                                  delays=tuple(settings.retry_delays),
                                  jitter=settings.retry_jitter)
        self._inbox: Mailbox[Job] = Mailbox(UNBOUNDED)  # lighter than an asyncio.Queue
        self.memory = TaskMemory(clock)
        self._scheduler = Scheduler(settings, self.fleet, self.memory, self._decide)
        self._ownership = Ownership(settings, db, self.memory, self.fleet)
        self._forwarder = forwarder  # commands for tasks another copy drives (ADR 0038)
        self._commands = Commands(settings, db, forwarder, self._call)
        self._admission = Admission(self.memory, default_limit=settings.max_active_tasks,
                                    max_subtasks=settings.max_subtasks)
        self.files = FileSweeper(db, artifacts, grace=settings.file_sweep_grace,
                                 interval=settings.file_sweep_interval)
        self._executes = Executes(settings, db, artifacts, self.memory)
        self._stopping = asyncio.Event()
        self.ready = asyncio.Event()
        self._acks = PendingAcks(settings.ack_linger)
        self._tokens = TokenRelay(bus)
        self.metrics = metrics or Metrics()
        self.metrics.watch(self.snapshot_counts, self.fleet.by_state,
                           lambda: self.db.wal_status())  # (read when scraped)
        # workers connected to other copies, and other copies' attempts on ours (ADR 0039)
        self._peers = None if relay is None else Peers(
            settings, db, self.memory, self.fleet, relay, post=self._post,
            tokens=self.agent_tokens)
        workers = WorkerJobs(settings, self.memory, self.fleet, work=self._work,
                             decide=self._decide)
        self._handlers: dict[type[Job], Callable[[Reader, Batch, Any, Context],
                                                 Awaitable[None]]] = {
            Submit: self._on_submit, Cancel: self._on_cancel,
            DecideCheckpoint: self._on_checkpoint, Register: workers.register,
            Disconnect: workers.disconnect, Beat: workers.heartbeat, Accepted: workers.accepted,
            Log: workers.log, Result: workers.result, Decline: workers.decline,
            Hold: workers.hold, Forget: workers.forget,
            Claims: self._on_claims, AdoptTasks: self._on_adopt_tasks,
            ReleaseTasks: self._on_release_tasks, Tick: self._on_tick, Admit: self._on_admit,
            Spent: self._on_spent}

    # ---- lifecycle --------------------------------------------------------------------------

    async def run(self) -> None:
        """Recover, then run the loop, the sweeper and the claims until `stop()`; drains the
        inbox, then releases this copy's claims so another copy can take its tasks over."""
        await self._recover()
        self.ready.set()
        serving = contextlib.nullcontext() if self._forwarder is None else \
            self._forwarder.serve(self._ownership.owner, self._commands.answer)
        sharing = contextlib.nullcontext() if self._peers is None else self._peers.running()
        async with serving, sharing, asyncio.TaskGroup() as tg:
            sweeper = tg.create_task(sweep(self._post, self.settings.sweep_interval,
                                           self._clock))
            claims = tg.create_task(self._ownership.keep(self._call, self._post))
            files = tg.create_task(self.files.run())
            await self._loop()
            sweeper.cancel()
            claims.cancel()
            files.cancel()
            await self._acks.flush()
        await self._ownership.release()  # not reached when cancelled (a crash): claims expire

    async def abandon(self) -> None:
        """After `run()` ended without its graceful stop (cancelled, as a crash ends it), let go
        of the connection it still holds, as a crashed process's would close; claims stay."""
        await self._ownership.abandon()

    def stop(self) -> None:
        """Ask the loop to finish what is queued, release this copy's claims and return."""
        self.ready.clear()  # no longer ready for new work (`/readyz`)
        self._stopping.set()
        self._inbox.put_nowait(Wake())

    async def _recover(self) -> None:
        """Reconcile what a crash left: claim the unfinished tasks no live copy holds, reload
        them, and give their live attempts a grace lease."""
        now = self._clock()
        claimed = await self._ownership.claim_at_start(now)
        async with self.db.begin() as conn:
            await worker_rows.mark_all_offline(conn)
            states = await load_task_states(conn, claimed) if claimed else []
        self._ownership.install(states, now)
        log.info("runtime.recovered", owner=self._ownership.owner, tasks=len(states),
                 live_attempts=len(self.memory.leases))

    # ---- API-facing -------------------------------------------------------------------------

    async def submit(
        self, task: TaskRecord, plan: planning.Plan | None = None,
        options: tuple[dict[str, Any], ...] = (), plan_items: tuple[dict[str, Any], ...] = (),
        links: list[dict[str, Any]] | None = None,
    ) -> TaskRecord:
        """Store a new task and start it, or queue it when its user has no active-task slot
        free (`plan_items`: the plan as sent, kept for its start; `links`: its
        `task_sources` rows); returns once durable."""
        result: TaskRecord = await self._call(Submit(task, plan, options, plan_items,
                                                     links or []))
        return result

    async def cancel(self, task_id: uuid.UUID, user_id: uuid.UUID) -> TaskRecord:
        """Cancel a task of `user_id`; its running attempts are told to stop."""
        return await self._commands.decide(Command(task_id, user_id))

    async def decide_checkpoint(self, task_id: uuid.UUID, user_id: uuid.UUID,
                                decision: CheckpointDecision) -> TaskRecord:
        """Apply a person's decision on a pending checkpoint of `user_id`'s task."""
        return await self._commands.decide(Command(task_id, user_id, decision))

    # ---- worker-facing ----------------------------------------------------------------------

    async def register(
        self, msg: WorkerRegister, *, token_id: uuid.UUID | None, send: Callable[[str], Any],
        close: Callable[[int, str], Any],
    ) -> Connection:
        """A worker connected: store it, adopt the attempts it still runs, make it schedulable."""
        conn: Connection = await self._call(Register(msg, token_id, send, close))
        if self._peers is not None:
            await self._peers.joined(conn, msg)
        return conn

    def forget(self, worker_ids: tuple[uuid.UUID, ...], task_ids: tuple[uuid.UUID, ...],
               sources: tuple[str, ...]) -> None:
        """Tell these workers to delete what they keep of deleted tasks and sources."""
        if worker_ids:
            self._post(Forget(worker_ids, task_ids, sources))

    def disconnect(self, conn: Connection) -> None:
        """A worker's socket closed; its attempts keep their leases until they run out."""
        if self._peers is not None:
            self._peers.left(conn)
        self._post(Disconnect(conn))

    def heartbeat(self, conn: Connection, hb: Heartbeat) -> None:
        """Renew the leases of the attempts the worker says it runs."""
        if self._peers is not None and conn.via is None:
            hb = self._peers.beat(conn, hb)
        self._post(Beat(conn, hb))

    def hold(self, conn: Connection, attempt_id: uuid.UUID) -> None:
        """An attempt's result is here but not stored yet (its files wait for room): its lease
        must not run out meanwhile."""
        self._post(Hold(conn, attempt_id))

    def _elsewhere(self, conn: Connection, attempt_id: uuid.UUID, msg: WorkerMessage) -> bool:
        """Whether another copy owns the attempt (the frame then goes to it)."""
        owner = self._peers.owner_of(attempt_id) if self._peers is not None else None
        if owner is None:
            return False
        self._peers.forward(conn, owner, msg)  # type: ignore[union-attr]
        return True

    def accepted(self, conn: Connection, attempt_id: uuid.UUID) -> None:
        """The worker started an attempt."""
        if self._peers is not None and self._elsewhere(
                conn, attempt_id, TaskAccepted(attempt_id=attempt_id)):
            return
        self._post(Accepted(conn, attempt_id))

    def agent_log(self, conn: Connection, msg: AgentLog) -> None:
        """A line of live output from an attempt."""
        if self._peers is not None and self._elsewhere(conn, msg.attempt_id, msg):
            return
        self._post(Log(conn, msg))

    def attempt_usage(self, conn: Connection, msg: AttemptUsage) -> None:
        """What a live attempt of a task with a budget has spent so far."""
        if self._peers is not None and self._elsewhere(conn, msg.attempt_id, msg):
            return
        self._post(Spent(msg))

    def agent_tokens(self, msg: AgentTokens, conn: Connection | None = None) -> None:
        """Streamed model text of a live attempt: to its task's watchers now, stored nowhere."""
        if conn is not None and self._peers is not None and self._elsewhere(
                conn, msg.attempt_id, msg):
            return
        tid = self.memory.attempt_task.get(msg.attempt_id)
        state = self.memory.states.get(tid) if tid else None
        att = state.attempts.get(msg.attempt_id) if state is not None else None
        if state is not None and att is not None:
            self._tokens.offer(msg.attempt_id, msg.text, task_id=state.task.id,
                               subtask_id=att.subtask_id, user_id=state.task.user_id)

    def post_result(
        self, conn: Connection, msg: TaskResult, manifest: list[dict[str, Any]],
        rejected: list[dict[str, Any]],
    ) -> None:
        """Apply an attempt's result; the runtime acknowledges it to `conn` once durable,
        together with the other results of that worker the same commit handled. Nothing is
        acknowledged if the commit fails: the worker re-sends after reconnecting."""
        if self._peers is not None and (owner := self._peers.owner_of(msg.attempt_id)):
            self._peers.forward(conn, owner, msg, manifest=manifest, rejected=rejected)
            return
        self._post(Result(conn, msg, manifest, rejected))

    # ---- the loop ---------------------------------------------------------------------------

    async def _call(self, job: Job) -> Any:
        if self._stopping.is_set():
            raise Unavailable("The control plane is shutting down; try again shortly.",
                              retry_after=5, code="shutting_down")
        job.future = asyncio.get_running_loop().create_future()
        self._inbox.put_nowait(job)
        return await job.future

    def _post(self, job: Job) -> None:
        self._inbox.put_nowait(job)

    async def _loop(self) -> None:
        while not (self._stopping.is_set() and self._inbox.empty()):
            batch = [await self._inbox.get()]
            self._drain(batch)
            if self.settings.batch_linger > 0 and _deferrable(batch):
                await self._linger(batch)
            batch = [j for j in batch if type(j) is not Wake]
            if batch:
                await self._process(batch, retry_alone=len(batch) > 1, races=0)

    def _drain(self, batch: list[Job]) -> None:
        while len(batch) < self.settings.batch_max and not self._inbox.empty():
            batch.append(self._inbox.get_nowait())

    async def _linger(self, batch: list[Job]) -> None:
        """Wait up to `batch_linger` for work that is not bookkeeping (ADR 0010)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.batch_linger
        while (_deferrable(batch) and len(batch) < self.settings.batch_max
               and not self._stopping.is_set()):
            try:
                async with asyncio.timeout_at(deadline):
                    batch.append(await self._inbox.get())
            except TimeoutError:
                return
            self._drain(batch)

    async def _process(self, batch: list[Job], *, retry_alone: bool, races: int) -> None:
        b = Batch(now=self._clock())
        ctx = Context(now=b.now, retry=self._retry, rand=self._rand(),
                      max_subtasks=self.settings.max_subtasks,
                      review_without_peer=self.settings.review_without_peer)
        try:
            async with Reader(self.db) as rd:  # only for what memory does not hold
                for job in batch:
                    await self._handle(rd, b, job, ctx)
            self._scheduler.schedule(b, ctx)
            await b.store_files(self.artifacts)
            states, stored = await b.commit(self.db)
        except Exception as exc:  # the transaction rolled back: nothing of it happened
            await self._rollback(batch, b, exc, retry_alone=retry_alone, races=races)
            return
        await self._after_commit(batch, b, states, stored)

    async def _rollback(
        self, batch: list[Job], b: Batch, exc: Exception, *, retry_alone: bool, races: int
    ) -> None:
        log.warning("runtime.batch_failed", error=str(exc), jobs=len(batch))
        for conn, aid in b.reserved:
            conn.running.discard(aid)
        for conn in b.joined:
            self.fleet.remove(conn)
        for tid in b.works:  # memory may be ahead of the store now: reload from the store
            self.memory.drop(tid)
            for st in await self._reload(tid):
                self.memory.remember(st)
        if retry_alone:
            for job in batch:
                job.error = None
                await self._process([job], retry_alone=False, races=races)
            return
        if races < MAX_RACES and lost_a_race(exc):  # another copy committed first: decide again
            for job in batch:
                job.error = None
            await self._process(batch, retry_alone=False, races=races + 1)
            return
        for job in batch:
            if isinstance(job, Result):
                await job.conn.close(1011, "result not stored; reconnect and resend")
            job.error = job.error or Unavailable(
                "The control plane could not store this change; try again.", retry_after=1,
            )
            job.settle()

    async def _reload(self, task_id: uuid.UUID) -> list[TaskState]:
        """A task as the store holds it, waiting out an outage of the store (PostgreSQL
        restarting, say) for up to `STORE_OUTAGE` seconds, not ready meanwhile; past that the
        runtime (and the process) stops, and start-up recovery rebuilds from the store."""
        loop = asyncio.get_running_loop()
        give_up, pause = loop.time() + STORE_OUTAGE, 0.1
        while True:
            try:
                states = await self._load(task_id)
            except Exception as exc:
                if loop.time() > give_up:
                    raise
                if self.ready.is_set():
                    log.warning("runtime.store_unreachable", error=str(exc))
                    self.ready.clear()
                await asyncio.sleep(pause)
                pause = min(2.0, pause * 2)
                continue
            if not self.ready.is_set() and not self._stopping.is_set():
                log.info("runtime.store_reachable")
                self.ready.set()
            return states

    async def _load(self, task_id: uuid.UUID) -> list[TaskState]:
        async with self.db.connection() as conn:
            return await load_task_states(conn, [task_id])

    # ---- job handlers -----------------------------------------------------------------------

    async def _handle(self, rd: Reader, b: Batch, job: Job, ctx: Context) -> None:
        try:
            await self._handlers[type(job)](rd, b, job, ctx)
        except ShoalError as exc:
            job.error = exc

    async def _work(self, rd: Reader, b: Batch, task_id: uuid.UUID) -> TaskWork:
        work = b.works.get(task_id)
        if work is not None:
            return work
        state = self.memory.states.get(task_id)
        if state is None:  # ended, not yet adopted, or another copy's (then: Unavailable)
            state = await self._ownership.take(rd.conn, task_id, b.now)
        work = b.works[task_id] = TaskWork(state)
        return work

    def _decide(self, b: Batch, work: TaskWork, inp: EngineInput, ctx: Context) -> None:
        b.apply(work, decide(work.state, inp, ctx))

    async def _on_submit(self, rd: Reader, b: Batch, job: Submit, ctx: Context) -> None:
        task, plan, options = job.task, job.plan, job.options
        b.new_tasks.append(task)
        if job.links:
            b.rows.append((uploads.task_sources, job.links))
        b.owner, b.owner_expires_at = self._ownership.owner, self._ownership.expires_at(b.now)
        work = b.works[task.id] = TaskWork(TaskState(task=task, subtasks={}, attempts={}))
        b.events.append(NewEvent(
            EventType.TASK_CREATED, {"task_id": str(task.id), "description": task.description,
                                     "status": task.status.value},
            task_id=task.id, user_id=task.user_id))
        slot = await self._admission.slot_for_new(rd, b, task.user_id)
        if slot is None:
            position = await self._admission.position_for_new(rd, b, task.user_id)
            self._decide(b, work, Queued(position, plan=job.plan_items), ctx)
        else:
            self._decide(b, work, Start(plan=plan, options=options, slot=slot), ctx)
        job.result = lambda: work.state.task

    async def _on_cancel(self, rd: Reader, b: Batch, job: Cancel, ctx: Context) -> None:
        task_id, user_id = job.task_id, job.user_id
        work = await self._work(rd, b, task_id)
        if work.state.task.user_id != user_id:
            raise NotFound(f"No task {task_id}.", details={"task_id": str(task_id)})
        self._decide(b, work, CancelRequested(), ctx)
        job.result = lambda: work.state.task

    async def _on_checkpoint(
        self, rd: Reader, b: Batch, job: DecideCheckpoint, ctx: Context
    ) -> None:
        task_id, user_id, decision = job.task_id, job.user_id, job.decision
        work = await self._work(rd, b, task_id)
        if work.state.task.user_id != user_id:
            raise NotFound(f"No task {task_id}.", details={"task_id": str(task_id)})
        self._decide(b, work, decision, ctx)
        job.result = lambda: work.state.task

    async def _on_claims(self, rd: Reader, b: Batch, job: Claims, ctx: Context) -> None:
        job.result = self._ownership.renew_in(b)

    async def _on_adopt_tasks(
        self, rd: Reader, b: Batch, job: AdoptTasks, ctx: Context
    ) -> None:
        await self._ownership.adopt(rd.conn, b, job.task_ids)

    async def _on_release_tasks(
        self, rd: Reader, b: Batch, job: ReleaseTasks, ctx: Context
    ) -> None:
        self._ownership.drop(b, job.task_ids)

    async def _on_tick(self, rd: Reader, b: Batch, job: Tick, ctx: Context) -> None:
        seen = job.at or b.now  # silence as heard: what came before `at` is decided (ADR 0055)
        for aid, expires in list(self.memory.leases.items()):
            tid = self.memory.attempt_task.get(aid)
            if expires > seen or tid is None:
                continue
            if (state := self.memory.states.get(tid)) and (att := state.attempts.get(aid)):
                self.fleet.silence(att.worker_id)
            with contextlib.suppress(StaleAttempt):
                self._decide(b, await self._work(rd, b, tid), Expired(aid), ctx)
        for tid, state in list(self.memory.states.items()):
            for cp in list(state.checkpoints.values()):
                if cp.deadline_at is not None and cp.deadline_at <= b.now:
                    work = await self._work(rd, b, tid)
                    if cp.id in work.state.checkpoints:
                        self._decide(b, work, CheckpointExpired(cp.id), ctx)
            budget = state.task.meta.budget
            started = state.task.started_at
            if (budget is not None and budget.seconds is not None and started is not None
                    and (b.now - started).total_seconds() >= budget.seconds):
                self._decide(b, await self._work(rd, b, tid), BudgetCheck(), ctx)
        for user_id in self._admission.waiting_users():
            await self._let_out(rd, b, user_id, ctx)

    async def _on_spent(self, rd: Reader, b: Batch, job: Spent, ctx: Context) -> None:
        tid = self.memory.attempt_task.get(job.msg.attempt_id)
        if tid is not None:  # else it ended: its result said what it spent
            usage = job.msg.usage.model_dump(exclude_none=True)
            self._decide(b, await self._work(rd, b, tid),
                         UsageReported(job.msg.attempt_id, usage), ctx)

    async def _on_admit(self, rd: Reader, b: Batch, job: Admit, ctx: Context) -> None:
        for user_id in job.user_ids:
            await self._let_out(rd, b, user_id, ctx)

    async def _let_out(self, rd: Reader, b: Batch, user_id: uuid.UUID, ctx: Context) -> None:
        """Start the queued tasks of `user_id` that may start now."""
        for task, start in await self._admission.let_out(rd, b, user_id):
            self._decide(b, await self._work(rd, b, task.id), start, ctx)

    # ---- after commit -----------------------------------------------------------------------

    async def _after_commit(
        self, batch: list[Job], b: Batch, states: dict[uuid.UUID, TaskState], stored: list[Event]
    ) -> None:
        freed = [st.task.user_id for tid, st in states.items()
                 if st.task.slot is None and b.works[tid].old.task.slot is not None]
        for tid, st in states.items():
            work = b.works[tid]
            self.memory.remember(st, work)
            for record in work.merged.records:
                if record.table == "guidance":
                    self._executes.forget_guidance(st.task.user_id)
        for job in batch:
            job.settle()
        if freed and (waiting := self._admission.waiting_users().intersection(freed)):
            self._post(Admit(frozenset(waiting)))  # their next tasks may start now
        for old in b.closes:
            await old.close(4000, "replaced by a newer connection from the same machine")
        for wc, text in b.messages:
            await send_to(wc, text)
        await self._executes.send(b.dispatches)
        for tid, st in states.items():  # counted once the next work is on its way
            work = b.works[tid]
            m = work.merged
            self.metrics.committed(work.old, st, m.changed_attempts.values(),
                                   (*m.new_subtasks, *m.changed_subtasks), b.now)
        if b.dispatches:
            self.metrics.dispatched((att.subtask_id for _, att in b.dispatches), b.now,
                                    self._clock())
        for tool in b.fenced:
            self.metrics.fenced(tool)
        if b.beats:
            self.metrics.heartbeats(b.beats, time.perf_counter())
        self._acks.add(batch)  # after the next work: a chain waits on that, not on acks
        for work in b.works.values():
            for att in work.merged.cancels:
                target = self.fleet.get(att.worker_id)
                if target is not None:
                    target.running.discard(att.id)
                    await send_to(target, cancel_message(att.id, "cancelled"))
        if stored:
            try:
                await self.bus.publish(stored)
            except ShoalError as exc:  # stored already; readers resync from the store
                log.warning("runtime.publish_failed", error=exc.message)

    def snapshot_counts(self) -> dict[str, int]:
        """Small numbers for health and metrics."""
        return {**self.memory.counts(), "workers": len(self.fleet)}


def _deferrable(batch: list[Job]) -> bool:
    """Whether every job in `batch` is bookkeeping no one waits on."""
    return all(job.bookkeeping for job in batch)

