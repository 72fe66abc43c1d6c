"""A worker's results on their way to the control plane, kept until each is acknowledged.

`Delivery.deliver()` sends a result at once and writes it to the on-disk outbox only if its
ack has not come `SAVE_AFTER` seconds later, or at once when it could not be sent (ADRs 0013,
0022). Results handed over in one turn of the event loop go out together in one frame to a
control plane that lists `batches` (ADR 0024). Until its ack a result is re-sent after every
reconnect: from memory until its outbox write is done, from disk afterwards.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Sized
from typing import Any

import structlog
from pydantic import BaseModel

from shoal.protocol import BATCH_BYTES, Ack, TaskResult, TaskResults, frames
from shoal.worker.outbox import Outbox

log = structlog.get_logger()

# Seconds a result sent on a live connection waits for its ack before it is written to the
# outbox; one acknowledged sooner never touches the disk (ADR 0022).
SAVE_AFTER = 0.1

Send = Callable[[BaseModel, str | None], Awaitable[bool]]
Spawn = Callable[[Coroutine[Any, Any, None]], "asyncio.Task[None] | None"]
_Waiting = list[tuple[TaskResult, str, "asyncio.Future[bool] | None"]]


class Delivery:
    """The results a worker has not had acknowledged, and how they travel and are kept.

    `send` sends one message (False when it could not go out); `spawn` runs disk work as a
    task of the worker's group (None when the worker is not running); `running` holds the
    attempts still executing, whose results could join one that is ready now.
    """

    def __init__(self, outbox: Outbox, send: Send, spawn: Spawn, running: Sized,
                 *, max_bytes: int) -> None:
        self.outbox = outbox
        self._send = send
        self._spawn = spawn
        self._running = running
        self.max_bytes = max_bytes
        # Set while connected to a control plane that lists `batches` (ADR 0024).
        self.batching = False
        # Results not yet acknowledged: held in memory until their outbox write is done, then
        # only on disk (None), so a long outage costs disk, not memory.
        self.unacked: dict[uuid.UUID, TaskResult | None] = {}
        self.saving: dict[uuid.UUID, asyncio.Task[None]] = {}  # outbox writes under way
        # Sent results whose outbox write waits SAVE_AFTER for the ack: timer, result, JSON.
        self.deferred: dict[uuid.UUID, tuple[asyncio.TimerHandle, TaskResult, str]] = {}
        # Results handed over this turn of the event loop, sent together on the next.
        self._outgoing: _Waiting = []

    async def load(self) -> None:
        """Hold, as unacknowledged, the results a previous run left in the outbox."""
        self.unacked = dict.fromkeys(result.attempt_id for result in await self.outbox.pending())

    async def deliver(self, result: TaskResult) -> None:
        """Keep `result` until it is acknowledged: send it at once, and write it to the
        outbox if no ack has come SAVE_AFTER seconds later (at once if it could not be sent).

        An ack that comes first spares the disk write altogether; a connection that drops, or
        a worker that stops, writes what is still waiting. Should the process die before the
        write, an attempt whose result the control plane did not get runs again once its lease
        runs out: no result is lost, at worst one attempt runs twice (ADRs 0013, 0022).
        """
        aid = result.attempt_id
        self.unacked[aid] = result
        text = result.model_dump_json()  # once, for the socket and the disk
        if not await self._send_result(result, text):
            self._start_save(result, text)
            return
        if aid in self.unacked:  # not acknowledged while the send was under way
            timer = asyncio.get_running_loop().call_later(SAVE_AFTER, self.save_late, aid)
            self.deferred[aid] = (timer, result, text)

    async def resend(self, only: set[uuid.UUID] | None = None) -> None:
        """Send again the results not yet acknowledged (`only` those named)."""
        on_disk: dict[uuid.UUID, TaskResult] | None = None
        for aid, held in list(self.unacked.items()):
            if only is not None and aid not in only:
                continue
            result = held
            if result is None:
                if on_disk is None:
                    on_disk = {r.attempt_id: r for r in await self.outbox.pending()}
                result = on_disk.get(aid)
            if result is None or aid not in self.unacked:
                continue  # acknowledged meanwhile, or its file could not be read
            if not await self._send(result, None):
                return

    def acknowledged(self, ack: Ack) -> None:
        """Forget `ack`'s result: here if only in memory (the usual case), else its outbox
        record is removed by a task of its own (batched disk work: not in the reader)."""
        if ack.attempt_id not in self.unacked:
            return  # a second ack for the same result
        del self.unacked[ack.attempt_id]
        # A line a result at the default level would cost the worker more than the rest of a
        # short attempt (some 55 µs each): an accepted result, the usual case, is a debug
        # line; a refused one (its lease lost, say) says why at info.
        (log.debug if ack.accepted else log.info)(
            "worker.result_acknowledged", attempt_id=str(ack.attempt_id), accepted=ack.accepted,
            reason=ack.reason)
        deferred = self.deferred.pop(ack.attempt_id, None)
        if deferred is not None:  # nothing on disk
            deferred[0].cancel()
        else:
            self._spawn(self.remove_saved(ack.attempt_id))

    async def remove_saved(self, attempt_id: uuid.UUID) -> None:
        saving = self.saving.get(attempt_id)
        if saving is not None:  # remove the file only once it is written
            await asyncio.wait([saving])
        try:
            await self.outbox.remove(attempt_id)
        except OSError:  # the file stays: re-sent after a restart, and refused
            log.warning("worker.outbox_remove_failed", attempt_id=str(attempt_id), exc_info=True)

    def save_late(self, attempt_id: uuid.UUID) -> None:
        """Write a sent result that is still unacknowledged."""
        deferred = self.deferred.pop(attempt_id, None)
        if deferred is not None:
            deferred[0].cancel()
            self._start_save(deferred[1], deferred[2])

    def save_deferred(self) -> None:
        """Write every sent result still waiting for its ack (the connection dropped, or the
        worker stops: whether they arrived is unknown)."""
        for attempt_id in list(self.deferred):
            self.save_late(attempt_id)

    def _start_save(self, result: TaskResult, text: str) -> None:
        task = self._spawn(self._save(result, text))
        if task is None:  # only after a fatal error: a clean stop wrote every result
            log.warning("worker.result_not_saved", attempt_id=str(result.attempt_id))
        else:
            self.saving[result.attempt_id] = task

    async def _save(self, result: TaskResult, text: str) -> None:
        aid = result.attempt_id
        try:
            await self.outbox.save(result, text)
        except OSError:  # it stays in memory and is re-sent from there after a reconnect
            log.exception("worker.outbox_write_failed", attempt_id=str(aid))
        else:
            if aid in self.unacked:  # on disk now: no need to hold it in memory as well
                self.unacked[aid] = None
        finally:
            self.saving.pop(aid, None)

    async def _send_result(self, result: TaskResult, text: str) -> bool:
        """Send `result` (as `text`); False when it could not go out.

        While `batching`, the results handed over in one turn of the event loop (attempts
        whose tools ended together) go out at the start of the next turn, together in one
        frame: one message for the control plane to read and, usually, one commit for them
        all, instead of one of each per result (ADR 0024). The first of them waits that turn
        and sends for all.
        """
        if not self.batching or not (self._running or self._outgoing):  # none can join it
            return await self._send(result, text)
        if self._outgoing:  # another result of this turn leads: go out with it
            sent: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
            self._outgoing.append((result, text, sent))
            return await sent
        self._outgoing.append((result, text, None))
        waiting: _Waiting = []
        try:
            await asyncio.sleep(0)  # the other attempts that ended this turn deliver meanwhile
            waiting, self._outgoing = self._outgoing, []
            return await self._send_frames(waiting)
        finally:
            if not waiting:  # cancelled while waiting: the others are not sent (kept on disk)
                waiting, self._outgoing = self._outgoing, []
            for _, _, follower in waiting:
                if follower is not None and not follower.done():
                    follower.set_result(False)

    async def _send_frames(self, waiting: _Waiting) -> bool:
        """Send `waiting` in as few frames as their size allows; tells each follower whether
        its frame went out, and returns that for the first."""
        first = False
        limit = min(BATCH_BYTES, self.max_bytes)
        for frame, members in frames([text for _, text, _ in waiting], "task_results",
                                     "results", limit):
            message = (waiting[members[0]][0] if len(members) == 1 else
                       TaskResults.model_construct(results=[waiting[i][0] for i in members]))
            ok = await self._send(message, frame)
            for i in members:
                follower = waiting[i][2]
                if follower is None:
                    first = ok
                elif not follower.done():
                    follower.set_result(ok)
        return first
