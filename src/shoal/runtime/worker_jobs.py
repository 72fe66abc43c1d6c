"""The jobs that come from workers: a worker joins or leaves, heartbeats, starts an attempt,
streams a log line, reports a result. `Runtime` hands them here from its loop, inside the batch
they were taken in."""

from __future__ import annotations

import contextlib
import functools
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta

from shoal.config import Settings
from shoal.engine.inputs import Declined, EngineInput, Expired, Finished, Started
from shoal.engine.step import Context
from shoal.errors import StaleAttempt
from shoal.events import EventType, NewEvent
from shoal.ids import as_id, new_id
from shoal.protocol import SERVER_FEATURES, ForgetTasks, Registered
from shoal.runtime.batch import Batch, Reader, TaskWork
from shoal.runtime.fleet import Connection, Fleet, Sample
from shoal.runtime.jobs import (
    Accepted,
    Beat,
    Decline,
    Disconnect,
    Forget,
    Hold,
    Log,
    Register,
    Result,
)
from shoal.runtime.memory import TaskMemory
from shoal.store import deletion
from shoal.store import files as file_rows
from shoal.store import workers as worker_rows
from shoal.store.state import renew_leases

WorkOf = Callable[[Reader, Batch, uuid.UUID], Awaitable[TaskWork]]
Decide = Callable[[Batch, TaskWork, EngineInput, Context], None]


class WorkerJobs:
    """What the loop does for each message a worker sends."""

    def __init__(self, settings: Settings, memory: TaskMemory, fleet: Fleet, *, work: WorkOf,
                 decide: Decide) -> None:
        self._settings = settings
        self._memory = memory
        self._fleet = fleet
        self._work = work
        self._decide = decide

    async def register(self, rd: Reader, b: Batch, job: Register, ctx: Context) -> None:
        msg, token_id, send, close = job.msg, job.token_id, job.send, job.close
        known = await worker_rows.find_worker_id(await rd.conn(), msg.machine_id)
        worker_id = as_id(known) if known else new_id()
        b.sql.append(functools.partial(worker_rows.save_worker, worker_id=worker_id, msg=msg,
                                       exists=known is not None, token_id=token_id, now=b.now))
        wc = Connection(worker_id=worker_id, machine_id=msg.machine_id, name=msg.machine_name,
                        tools={t.name: t.local for t in msg.tools}, slots=msg.slots,
                        send=send, close=close, features=frozenset(msg.features))
        old = self._fleet.add(wc)
        if old is not None:
            b.closes.append(old)
        b.joined.append(wc)
        b.messages.append((wc, Registered(
            worker_id=worker_id, heartbeat_interval=self._settings.heartbeat_interval,
            lease_seconds=self._settings.lease_seconds,
            features=list(SERVER_FEATURES)).model_dump_json()))
        await self._adopt(rd, b, wc, set(msg.running), set(msg.buffered), ctx)
        if "forget" in wc.features and (msg.kept_tasks or msg.kept_sources):
            tasks, sources = await (await rd.conn()).run_sync(
                deletion.gone, msg.kept_tasks, msg.kept_sources)
            if tasks or sources:  # deleted while it was away
                b.messages.append((wc, ForgetTasks(task_ids=tasks, sources=sources)
                                   .model_dump_json()))
        b.events.append(_worker_event(wc, "online"))
        job.result = lambda: wc

    async def _adopt(
        self, rd: Reader, b: Batch, wc: Connection, running: set[uuid.UUID],
        buffered: set[uuid.UUID], ctx: Context,
    ) -> None:
        """Keep the attempts the worker still runs or has a result for; expire the ones it lost."""
        lease = b.now + timedelta(seconds=self._settings.lease_seconds)
        for aid, tid in list(self._memory.attempt_task.items()):
            work = await self._work(rd, b, tid)
            att = work.state.attempts.get(aid)
            if att is None or att.worker_id != wc.worker_id:
                continue
            if aid in running:
                wc.running.add(aid)
                self._memory.leases[aid] = lease
            elif aid in buffered:
                self._memory.leases[aid] = lease  # its result is about to be re-sent
            else:
                self._decide(b, work, Expired(aid, "The worker restarted without it."), ctx)

    async def forget(self, rd: Reader, b: Batch, job: Forget, ctx: Context) -> None:
        """Tell the workers that kept copies of deleted things to delete them (those not
        connected anywhere are told when they register again: `register`)."""
        text = ForgetTasks(task_ids=list(job.task_ids), sources=list(job.sources)) \
            .model_dump_json()
        for worker_id in job.worker_ids:
            wc = self._fleet.get(worker_id)
            if wc is not None and "forget" in wc.features:
                b.messages.append((wc, text))

    async def disconnect(
        self, rd: Reader, b: Batch, job: Disconnect, ctx: Context
    ) -> None:
        wc = job.conn
        if self._fleet.remove(wc):
            b.sql.append(functools.partial(worker_rows.set_worker_status,
                                           worker_id=wc.worker_id, status="offline"))
            b.events.append(_worker_event(wc, "offline"))

    async def heartbeat(self, rd: Reader, b: Batch, job: Beat, ctx: Context) -> None:
        wc, hb = job.conn, job.heartbeat
        b.beats.append(job.posted)
        wc.silent = False  # heard from
        wc.cpu_percent, wc.memory_percent, wc.disk_percent = (
            hb.cpu_percent, hb.memory_percent, hb.disk_percent)
        wc.samples.append(Sample(b.now, hb.cpu_percent, hb.memory_percent, hb.disk_percent))
        lease = b.now + timedelta(seconds=self._settings.lease_seconds)
        via = wc.via
        mine = [a for a in hb.running if a in wc.running] if via else wc.heard(hb.running)
        for aid in mine:
            self._memory.leases[aid] = lease
        b.sql.append(functools.partial(renew_leases, attempt_ids=mine, expires_at=lease))
        if via is not None:
            return  # connected to another copy: that copy records the worker
        status = "busy" if len(wc.running) >= wc.slots else "online"
        b.sql.append(functools.partial(
            worker_rows.record_heartbeat, worker_id=wc.worker_id, cpu=hb.cpu_percent,
            memory=hb.memory_percent, disk=hb.disk_percent, status=status, now=b.now))
        b.events.append(_worker_event(wc, status))

    async def hold(self, rd: Reader, b: Batch, job: Hold, ctx: Context) -> None:
        if job.attempt_id in job.conn.running and job.attempt_id in self._memory.leases:
            lease = b.now + timedelta(seconds=self._settings.lease_seconds)
            self._memory.leases[job.attempt_id] = lease
            b.sql.append(functools.partial(renew_leases, attempt_ids=[job.attempt_id],
                                           expires_at=lease))

    async def decline(self, rd: Reader, b: Batch, job: Decline, ctx: Context) -> None:
        """Another copy could not pass attempts on to a worker connected to it: placed again,
        no try spent, elsewhere (the worker left that copy) or later (it was full)."""
        wc = self._fleet.get(job.worker_id)
        if wc is not None and wc.via is not None:
            if job.full:
                wc.running.difference_update(job.attempt_ids)
                wc.declined()
            else:
                self._fleet.remove(wc)
        for aid in job.attempt_ids:
            tid = self._memory.attempt_task.get(aid)
            if tid is not None:
                with contextlib.suppress(StaleAttempt):
                    self._decide(b, await self._work(rd, b, tid), Declined(aid, job.reason), ctx)

    async def accepted(self, rd: Reader, b: Batch, job: Accepted, ctx: Context) -> None:
        aid = job.attempt_id
        tid = self._memory.attempt_task.get(aid)
        if tid is not None:
            with contextlib.suppress(StaleAttempt):
                self._decide(b, await self._work(rd, b, tid), Started(aid), ctx)

    async def log(self, rd: Reader, b: Batch, job: Log, ctx: Context) -> None:
        msg = job.msg
        tid = self._memory.attempt_task.get(msg.attempt_id)
        state = self._memory.states.get(tid) if tid else None
        if state is None or tid is None:
            return  # a log line from an attempt that has ended: nothing to attach it to
        att = state.attempts.get(msg.attempt_id)
        b.events.append(NewEvent(EventType.AGENT_LOG, {
            "task_id": str(tid), "subtask_id": str(att.subtask_id) if att else None,
            "attempt_id": str(msg.attempt_id), "level": msg.level, "message": msg.message,
        }, task_id=tid, user_id=state.task.user_id))

    async def result(self, rd: Reader, b: Batch, job: Result, ctx: Context) -> None:
        wc, msg, manifest, rejected = job.conn, job.msg, job.manifest, job.rejected
        aid = self._memory.attempt_ids.get(msg.attempt_id.int, msg.attempt_id)  # the runtime's
        wc.running.discard(aid)
        wc.silent = False
        tid = self._memory.attempt_task.get(aid)
        if tid is None:  # counted as refused too: which tool ran it, memory no longer knows
            b.fenced.append("")
            job.result = lambda: (False, "This attempt has ended; its result is refused.")
            return
        work = await self._work(rd, b, tid)
        att = work.state.attempts.get(aid)
        if att is None or att.fence != msg.fence or (  # (`is` first: UUID's == is two calls)
                att.worker_id is not wc.worker_id and att.worker_id != wc.worker_id):
            b.fenced.append(att.tool if att is not None else "")
            job.result = lambda: (False, "The attempt lost its lease; its result is refused.")
            return
        if msg.status == "declined":  # it never ran: placed again, elsewhere or later
            wc.declined()
            inp: EngineInput = Declined(aid, msg.error or "The worker declined it.")
        else:
            inp = Finished(
                attempt_id=aid, status=msg.status, output=msg.output,
                files=tuple(manifest), rejected_files=tuple(rejected),
                usage=msg.usage.model_dump(), error=msg.error,
                denials=tuple(msg.denials), duration_seconds=msg.duration_seconds)
        try:
            self._decide(b, work, inp, ctx)
        except StaleAttempt as exc:
            b.fenced.append(att.tool)
            reason = exc.message
            job.result = lambda: (False, reason)
            return
        if msg.status == "succeeded" and manifest:
            b.rows.append((file_rows.artifacts, file_rows.manifest_rows(
                task_id=tid, subtask_id=att.subtask_id, attempt_id=att.id, entries=manifest,
                now=b.now)))
        job.result = lambda: (True, None)


def _worker_event(wc: Connection, status: str) -> NewEvent:
    return NewEvent(EventType.WORKER_UPDATE, {
        "worker_id": str(wc.worker_id), "machine_id": wc.machine_id, "machine_name": wc.name,
        "status": status, "tools": sorted(wc.tools), "slots": wc.slots,
        "running": len(wc.running),
        "resources": {"cpu_percent": wc.cpu_percent, "memory_percent": wc.memory_percent,
                      "disk_percent": wc.disk_percent},
    })

