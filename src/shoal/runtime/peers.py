"""Workers shared between control-plane copies (ADR 0039), on both ends of the relay.

As the copy a worker is connected to: its card goes in the directory (on joining and every
heartbeat); frames for it from other copies are passed on as they are, and the attempts they
start are remembered with their owner (`_relayed`) and counted against the worker's slots; the
worker's frames about those attempts go to their owner — a heartbeat split by owner, a result
with its files stored already. A worker that joins here still running attempts this copy does
not know reports them to their owners (looked up in the store), which take them back.

As the copy that owns a task: every other copy's fresh cards become connections in the fleet
(`Connection.via`), placed on after the workers connected here; what is sent to them goes
through the copy they are connected to, and what comes back from them is handled as if they
were connected here: the same jobs, the same fencing.

Frames to other copies leave in the order they were given, through one sender.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

import structlog

from shoal.config import Settings
from shoal.protocol import (
    AgentLog,
    AgentTokens,
    AttemptUsage,
    Heartbeat,
    ResendResults,
    TaskAccepted,
    TaskResult,
    WorkerMessage,
    WorkerRegister,
    parse_worker_message,
)
from shoal.runtime.fleet import Connection, Fleet
from shoal.runtime.jobs import Accepted, Beat, Decline, Job, Log, Result, Spent
from shoal.runtime.memory import TaskMemory
from shoal.runtime.relay import (
    Envelope,
    FromWorker,
    Left,
    Refused,
    Relay,
    ToWorker,
    WorkerCard,
    card_age,
)
from shoal.store.claims import owners_of_attempts
from shoal.store.db import Database
from shoal.store.models import utcnow

log = structlog.get_logger(__name__)
Step = Callable[[], Awaitable[None]]
BATCH = 256  # envelopes sent together at most
SEND_ON_STOP = 5.0  # seconds a stopping copy gives what it still has to send to other copies


@dataclass(frozen=True, slots=True)
class _Post:
    """An envelope for `to`."""

    to: str
    env: Envelope


@dataclass(frozen=True, slots=True)
class _ResultOut:
    """A result for the copy the store names as its attempt's owner when it leaves (`owner`,
    the copy that sent the attempt, if the store names none)."""

    conn: Connection
    owner: str
    msg: TaskResult
    env: FromWorker


class Peers:
    """This copy's side of sharing workers with the other copies."""

    def __init__(self, settings: Settings, db: Database, memory: TaskMemory, fleet: Fleet,
                 relay: Relay, *, post: Callable[[Job], None],
                 tokens: Callable[[AgentTokens], None]) -> None:
        self.me = settings.instance_id
        self._settings = settings
        self._db = db
        self._memory = memory
        self._fleet = fleet
        self._relay = relay
        self._post = post
        self._tokens = tokens
        self._relayed: dict[uuid.UUID, str] = {}  # another copy's attempt on a worker here → it
        self._out: asyncio.Queue[_Post | _ResultOut | Step] = asyncio.Queue()
        self._stop = asyncio.Event()
        self._fresh = 3 * settings.heartbeat_interval  # a card older than this is ignored
        self._heard: dict[str, float] = {}  # copy → when it last sent a frame for a worker here
        # a copy heard from this recently still holds the claims it held then: its claim was
        # renewed at most `claim_interval` before and lasts `claim_ttl`
        self._sure = settings.claim_ttl - settings.claim_interval

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """While entered: receive the other copies' envelopes, send ours, read the directory."""
        async with self._relay.serve(self.me, self.receive), asyncio.TaskGroup() as tg:
            sender = tg.create_task(self._send())
            reader = tg.create_task(self._read_directory())
            try:
                yield
            finally:
                self._stop.set()  # also ends the loop where redis-py swallowed the cancel
                reader.cancel()
                with contextlib.suppress(TimeoutError):  # what was handed over still leaves
                    async with asyncio.timeout(SEND_ON_STOP):
                        await self._out.join()
                sender.cancel()

    # ---- the copy the worker is connected to ------------------------------------------------

    def owner_of(self, attempt_id: uuid.UUID) -> str | None:
        """The copy that owns an attempt running on a worker connected here, if not this one
        (one that this copy took over since is its own)."""
        owner = self._relayed.get(attempt_id)
        if owner is not None and attempt_id in self._memory.attempt_task:
            del self._relayed[attempt_id]
            return None
        return owner

    async def joined(self, conn: Connection, msg: WorkerRegister) -> None:
        """A worker connected here: publish its card; hand the attempts it still runs (or has
        a result of) that another copy owns back to that copy."""
        unknown = [a for a in (*msg.running, *msg.buffered) if a not in self._memory.attempt_task]
        owners = await self._owners(unknown) if unknown else {}
        by_owner: dict[str, list[uuid.UUID]] = {}
        for aid, owner in owners.items():
            self._relayed[aid] = owner
            by_owner.setdefault(owner, []).append(aid)
            if aid in msg.running:
                conn.running.add(aid)
        card = self.card(conn)
        await self._relay.publish(card)
        for owner, aids in by_owner.items():
            self._enqueue(owner, FromWorker(card=card, text=Heartbeat(
                running=aids).model_dump_json()))

    def left(self, conn: Connection) -> None:
        """A worker's socket closed: tell the owners of what it ran for them; remove its card."""
        owners = {self._relayed.pop(aid) for aid in list(conn.running) if aid in self._relayed}
        for owner in owners:
            self._enqueue(owner, Left(worker_id=conn.worker_id, via=self.me))
        self._later(lambda: self._relay.withdraw(conn.worker_id, self.me))

    def beat(self, conn: Connection, hb: Heartbeat) -> Heartbeat:
        """Pass the part of a heartbeat about other copies' attempts to their owners (looked
        up again: an owner may have died and another taken its tasks); the rest is ours."""
        card = self.card(conn)
        self._later(lambda: self._relay.publish(card))
        foreign = [a for a in hb.running if self.owner_of(a) is not None]
        if not foreign:
            return hb
        self._later(lambda: self._beat_owners(card, hb, foreign))
        return hb.model_copy(update={"running": [a for a in hb.running if a not in foreign]})

    async def _beat_owners(self, card: WorkerCard, hb: Heartbeat, foreign: list[uuid.UUID]) -> None:
        owners = await self._owners(foreign)
        by_owner: dict[str, list[uuid.UUID]] = {}
        for aid in foreign:
            owner = owners.get(aid)
            if owner is None:  # no other live copy holds its task: ours now, or nobody's yet
                continue
            self._relayed[aid] = owner
            by_owner.setdefault(owner, []).append(aid)
        for owner, aids in by_owner.items():
            await self._relay.post(owner, FromWorker(card=card, text=hb.model_copy(
                update={"running": aids}).model_dump_json()))

    def forward(self, conn: Connection, owner: str, msg: WorkerMessage, *,
                manifest: list[dict[str, Any]] | None = None,
                rejected: list[dict[str, Any]] | None = None) -> None:
        """Pass a worker's frame about `owner`'s attempt to `owner`; a result ends the
        attempt here."""
        if not isinstance(msg, TaskResult):
            self._enqueue(owner, FromWorker(card=self.card(conn), text=msg.model_dump_json()))
            return
        conn.running.discard(msg.attempt_id)
        self._relayed.pop(msg.attempt_id, None)
        env = FromWorker(card=self.card(conn), text=msg.model_copy(update={"files": []})
                         .model_dump_json(), manifest=manifest or [], rejected=rejected or [])
        # to the copy the store names as owner when it leaves: the one that sent the attempt
        # may have died and another (this one, say) taken its task over
        self._out.put_nowait(_ResultOut(conn, owner, msg, env))

    def card(self, conn: Connection) -> WorkerCard:
        """The directory's card of a worker connected here."""
        return WorkerCard(worker_id=conn.worker_id, copy_name=self.me, name=conn.name,
                          machine_id=conn.machine_id, tools=conn.tools, slots=conn.slots,
                          running=len(conn.running), features=sorted(conn.features),
                          at=time.time())

    async def _pass_on(self, env: ToWorker) -> None:
        """Pass a frame on to a worker connected here; attempts it has no room for (another
        copy placed on the same slots at the same moment) go back to their owner instead."""
        wc = self._fleet.get(env.worker_id)
        starts = _attempts_started(env.text)
        if wc is None or wc.via is not None:
            if starts:
                await self._relay.post(env.owner, Refused(
                    worker_id=env.worker_id, attempts=starts,
                    reason=f"The worker was no longer connected to control-plane copy "
                           f"{self.me!r} when the attempt reached it."))
            return
        for aid in _resends_asked(env.text):  # the results come back to the copy that asks
            self._relayed[aid] = env.owner
        text = env.text
        room = wc.slots - len(wc.running)
        if len(starts) > room:
            starts, over = starts[:max(room, 0)], starts[max(room, 0):]
            await self._relay.post(env.owner, Refused(
                worker_id=env.worker_id, attempts=over, full=True,
                reason="The worker had no free slot: another copy's work took it first."))
            await self._relay.publish(self.card(wc))  # what the others see of it is stale
            if not starts:
                return
            text = _only_attempts(text, starts)
        for aid in starts:
            self._relayed[aid] = env.owner
            wc.running.add(aid)
        try:
            await wc.send(text)
        except Exception as exc:  # a dead socket: the owner's lease brings the work back
            log.info("relay.send_failed", worker=str(wc.worker_id), error=str(exc))

    # ---- the copy that owns the task --------------------------------------------------------

    async def receive(self, env: Envelope) -> None:
        """Handle one envelope another copy sent here."""
        if isinstance(env, ToWorker):
            self._heard[env.owner] = time.monotonic()
            await self._pass_on(env)
        elif isinstance(env, FromWorker):
            self._from_worker(env)
        elif isinstance(env, Refused):
            self._post(Decline(env.worker_id, tuple(env.attempts), env.reason, env.full))
        elif isinstance(env, Left):
            wc = self._fleet.get(env.worker_id)
            if wc is not None and wc.via == env.via:
                self._fleet.remove(wc)  # its attempts keep their leases until they run out

    def _from_worker(self, env: FromWorker) -> None:
        try:
            msg = parse_worker_message(env.text)
        except Exception as exc:  # checked where it entered; a bad one here is a bug
            log.warning("relay.bad_worker_frame", error=str(exc))
            return
        conn = self._remote(env.card)
        if isinstance(msg, Heartbeat):
            self._take_back(conn, msg.running)
            self._post(Beat(conn, msg))
        elif isinstance(msg, TaskAccepted):
            self._post(Accepted(conn, msg.attempt_id))
        elif isinstance(msg, AgentLog):
            self._post(Log(conn, msg))
        elif isinstance(msg, AgentTokens):
            self._tokens(msg)
        elif isinstance(msg, AttemptUsage):
            self._post(Spent(msg))
        elif isinstance(msg, TaskResult):
            self._post(Result(conn, msg, env.manifest, env.rejected))

    def _take_back(self, conn: Connection, running: Iterable[uuid.UUID]) -> None:
        """Count the attempts a worker reports running for us (it may have moved to another
        copy, or we took its tasks over) as running on it, so their leases renew."""
        for aid in running:
            tid = self._memory.attempt_task.get(aid)
            state = self._memory.states.get(tid) if tid is not None else None
            att = state.attempts.get(aid) if state is not None else None
            if att is not None and att.worker_id == conn.worker_id:
                conn.running.add(aid)

    def _remote(self, card: WorkerCard, *, ask: bool = False) -> Connection:
        """The fleet's connection to a worker connected to another copy (made, or moved to
        `card`'s copy); a worker connected here is used as it is. With `ask`, a worker new to
        the fleet that holds attempts of this copy's tasks is asked to send again the results
        it still holds (they may have gone to a copy that died)."""
        wc = self._fleet.get(card.worker_id)
        if wc is not None and (wc.via is None or wc.via == card.copy_name):
            if wc.via is not None:
                wc.slots, wc.tools = card.slots, card.tools
                wc.elsewhere = max(0, card.running - len(wc.running))
            return wc
        conn = Connection(worker_id=card.worker_id, machine_id=card.machine_id, name=card.name,
                          tools=card.tools, slots=card.slots,
                          send=lambda text: self._to_worker(card.worker_id, text),
                          close=_no_close, features=frozenset(card.features),
                          via=card.copy_name)
        if wc is not None:
            conn.running = wc.running
        else:
            self._take_back(conn, self._memory.attempt_task)
            if ask and conn.running and "resend" in conn.features:
                self._enqueue(card.copy_name, ToWorker(
                    worker_id=card.worker_id, owner=self.me,
                    text=ResendResults(attempt_ids=sorted(conn.running)).model_dump_json()))
        conn.elsewhere = max(0, card.running - len(conn.running))
        self._fleet.add_remote(conn)
        return conn

    async def _to_worker(self, worker_id: uuid.UUID, text: str) -> None:
        wc = self._fleet.get(worker_id)
        if wc is not None and wc.via is not None:
            self._enqueue(wc.via, ToWorker(worker_id=worker_id, owner=self.me, text=text))

    async def _read_directory(self) -> None:
        """Keep the other copies' workers in the fleet, as their cards say."""
        every = min(2.0, self._settings.heartbeat_interval / 2)
        while not self._stop.is_set():
            cards = {c.worker_id: c for c in await self._relay.cards()
                     if c.copy_name != self.me and card_age(c) <= self._fresh}
            for wc in self._fleet.connections():
                if wc.via is not None and (
                        (card := cards.get(wc.worker_id)) is None or card.copy_name != wc.via):
                    self._fleet.remove(wc)
            for card in cards.values():
                self._remote(card, ask=True)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), every)

    # ---- sending ---------------------------------------------------------------------------

    def _enqueue(self, copy_name: str, env: Envelope) -> None:
        self._out.put_nowait(_Post(copy_name, env))

    def _later(self, step: Step) -> None:
        self._out.put_nowait(step)

    async def _send(self) -> None:
        """Send what was handed over, in order: what is waiting goes together (consecutive
        envelopes for one copy in one push; the owners of the results among them looked up in
        one query)."""
        while True:
            items = [await self._out.get()]
            while len(items) < BATCH and not self._out.empty():
                items.append(self._out.get_nowait())
            try:
                await self._send_all(items)
            except Exception:
                log.exception("relay.send_failed")
            finally:
                for _ in items:
                    self._out.task_done()

    async def _send_all(self, items: list[_Post | _ResultOut | Step]) -> None:
        sure = time.monotonic() - self._sure
        results = [i.msg.attempt_id for i in items if isinstance(i, _ResultOut)
                   and self._heard.get(i.owner, -1e9) < sure]
        owners = await self._owners(results, mine=True) if results else {}
        run: list[Envelope] = []
        to = ""
        for item in items:
            if isinstance(item, _ResultOut):
                now = owners.get(item.msg.attempt_id, item.owner)
                if now == self.me:
                    self._post(Result(item.conn, item.msg, item.env.manifest, item.env.rejected))
                    continue
                item = _Post(now, item.env)
            if isinstance(item, _Post) and (not run or item.to == to):
                to = item.to
                run.append(item.env)
                continue
            if run:
                await self._relay.post(to, *run)
                run = []
            if isinstance(item, _Post):
                to, run = item.to, [item.env]
            else:
                await item()
        if run:
            await self._relay.post(to, *run)

    async def _owners(self, attempt_ids: list[uuid.UUID], *,
                      mine: bool = False) -> dict[uuid.UUID, str]:
        """The live copies (other than this one unless `mine`) that own these attempts' tasks."""
        async with self._db.connection() as conn:
            owners = await conn.run_sync(owners_of_attempts, attempt_ids, now=utcnow())
        return {aid: owner for aid, owner in owners.items() if mine or owner != self.me}


def _attempts_started(text: str) -> list[uuid.UUID]:
    """The attempts an `execute_task(s)` frame starts (none for other frames)."""
    if '"execute_task' not in text:
        return []
    frame = json.loads(text)
    tasks = frame.get("tasks") if frame.get("type") == "execute_tasks" else [frame]
    return [uuid.UUID(t["attempt_id"]) for t in tasks or () if t.get("type") == "execute_task"]


def _resends_asked(text: str) -> list[uuid.UUID]:
    """The attempts whose results a `resend_results` frame asks for (none for other frames)."""
    if '"resend_results"' not in text:
        return []
    return [uuid.UUID(aid) for aid in json.loads(text).get("attempt_ids", ())]


def _only_attempts(text: str, keep: list[uuid.UUID]) -> str:
    """An `execute_tasks` frame with only the attempts in `keep`."""
    frame = json.loads(text)
    wanted = {str(aid) for aid in keep}
    frame["tasks"] = [t for t in frame["tasks"] if t.get("attempt_id") in wanted]
    return json.dumps(frame)


async def _no_close(code: int, reason: str) -> None:
    """Closing a worker connected to another copy is that copy's business."""
