"""Streamed model text on its way to clients: published at once, stored nowhere.

A worker sends a running attempt's text as it streams (`agent_tokens`); each message becomes
an `agent_token` event on the bus (sequence number 0: live only, never replayed; the attempt's
`agent_log` lines keep the text). Whatever a worker sends, clients get at most one event per
`interval` per attempt: text arriving sooner waits, merged, for the rest of the interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from shoal.bus.base import EventBus
from shoal.errors import ShoalError
from shoal.events import Event, EventType
from shoal.store.models import utcnow

INTERVAL = 0.05  # seconds between two `agent_token` events of one attempt
TRACKED = 4096  # attempts whose last event time is remembered (the least recent go first)


@dataclass
class _Pending:
    task_id: uuid.UUID
    subtask_id: uuid.UUID
    user_id: uuid.UUID
    text: str = ""
    last: float = float("-inf")  # when this attempt's previous event went out
    waiting: bool = False  # a flush is scheduled


class TokenRelay:
    """Publishes attempts' streamed text, at most one event per `interval` per attempt."""

    def __init__(self, bus: EventBus, *, interval: float = INTERVAL,
                 clock: Callable[[], float] = time.monotonic,
                 later: Callable[[float, Callable[[], None]], object] | None = None) -> None:
        self._bus = bus
        self._interval = interval
        self._clock = clock
        self._later = later  # how a flush is put off (default: the running loop's call_later)
        self._pending: OrderedDict[uuid.UUID, _Pending] = OrderedDict()
        self._sending: set[asyncio.Task[None]] = set()

    def offer(self, attempt_id: uuid.UUID, text: str, *, task_id: uuid.UUID,
              subtask_id: uuid.UUID, user_id: uuid.UUID) -> None:
        """Text of a live attempt: out now, or merged into the next event of its interval."""
        entry = self._pending.get(attempt_id)
        if entry is None:
            entry = self._pending[attempt_id] = _Pending(task_id, subtask_id, user_id)
            while len(self._pending) > TRACKED and not self._pending[next(iter(self._pending))
                                                                      ].waiting:
                self._pending.popitem(last=False)
        self._pending.move_to_end(attempt_id)
        entry.text += text
        if entry.waiting:
            return
        wait = entry.last + self._interval - self._clock()
        if wait > 0:
            entry.waiting = True
            later = self._later or asyncio.get_running_loop().call_later
            later(wait, lambda: self._flush(attempt_id))
        else:
            self._flush(attempt_id)

    def _flush(self, attempt_id: uuid.UUID) -> None:
        entry = self._pending.get(attempt_id)
        if entry is None:
            return
        entry.waiting = False
        if not entry.text:
            return
        event = Event(seq=0, type=EventType.AGENT_TOKEN, timestamp=utcnow(),
                      task_id=entry.task_id, user_id=entry.user_id,
                      data={"task_id": str(entry.task_id), "subtask_id": str(entry.subtask_id),
                            "attempt_id": str(attempt_id), "text": entry.text})
        entry.text, entry.last = "", self._clock()
        task = asyncio.create_task(self._publish(event))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _publish(self, event: Event) -> None:
        with contextlib.suppress(ShoalError):  # live text only: a missed piece is in the log
            await self._bus.publish([event])
