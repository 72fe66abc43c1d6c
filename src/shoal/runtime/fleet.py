"""The workers connected to this control-plane copy, with their free slots."""

from __future__ import annotations

import asyncio
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime

from shoal.engine.allocation import WorkerView

Send = Callable[[str], Awaitable[None]]
SAMPLES = 60  # heartbeats' resource readings kept per connection (10 min at the default 10 s)


@dataclass(frozen=True, slots=True)
class Sample:
    """One heartbeat's resource readings."""

    at: datetime
    cpu_percent: float
    memory_percent: float
    disk_percent: float


@dataclass(slots=True)
class Connection:
    """One live worker connection."""

    worker_id: uuid.UUID
    machine_id: str
    name: str
    tools: dict[str, bool]  # tool name → runs locally
    slots: int
    send: Send
    close: Callable[[int, str], Awaitable[None]]
    running: set[uuid.UUID] = field(default_factory=set)
    features: frozenset[str] = frozenset()  # protocol additions the worker understands
    cpu_percent: float = 0.0
    memory_percent: float = 0.0
    disk_percent: float = 0.0
    samples: deque[Sample] = field(default_factory=lambda: deque(maxlen=SAMPLES))

    def view(self) -> WorkerView:
        """This worker as the allocation policy sees it."""
        return WorkerView(
            worker_id=self.worker_id, tools=self.tools, slots=self.slots,
            running=len(self.running), cpu_percent=self.cpu_percent,
            memory_percent=self.memory_percent, disk_percent=self.disk_percent,
        )


class Fleet:
    """Connected workers by id; at most one live connection per worker."""

    def __init__(self) -> None:
        self._by_id: dict[uuid.UUID, Connection] = {}
        self.joined = asyncio.Event()  # set once any worker has connected

    def add(self, conn: Connection) -> Connection | None:
        """Register a connection; returns the one it replaces, if any."""
        old = self._by_id.get(conn.worker_id)
        self._by_id[conn.worker_id] = conn
        self.joined.set()
        return old

    def remove(self, conn: Connection) -> bool:
        """Forget `conn` if it is still the worker's current connection."""
        if self._by_id.get(conn.worker_id) is conn:
            del self._by_id[conn.worker_id]
            return True
        return False

    def get(self, worker_id: uuid.UUID | None) -> Connection | None:
        """The live connection of a worker, if it is connected here."""
        return self._by_id.get(worker_id) if worker_id is not None else None

    def connections(self) -> list[Connection]:
        """Every live connection."""
        return list(self._by_id.values())

    def has_free_slot(self) -> bool:
        """Whether any connected worker could take an attempt now."""
        return any(len(c.running) < c.slots for c in self._by_id.values())

    def by_state(self) -> list[tuple[str, int]]:
        """How many connected workers have a free slot (`online`) and how many are full
        (`busy`)."""
        busy = sum(1 for c in self._by_id.values() if len(c.running) >= c.slots)
        return [("online", len(self._by_id) - busy), ("busy", busy)]

    def __len__(self) -> int:
        return len(self._by_id)
