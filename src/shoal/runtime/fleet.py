"""The workers connected to this control-plane copy, with their free slots."""

from __future__ import annotations

import asyncio
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
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
    via: str | None = None  # connected to that other copy (ADR 0039), not to this one
    elsewhere: int = 0  # attempts of other copies it runs, as its copy last said
    silent: bool = False  # an attempt's lease ran out on it and it has not been heard from since

    def declined(self) -> None:
        """It declined an attempt for want of room: what it runs that this copy does not know
        of fills its free slots, until its card (or, connected here, its heartbeat) says."""
        self.elsewhere = max(self.elsewhere, self.slots - len(self.running))

    def heard(self, running: Sequence[uuid.UUID]) -> list[uuid.UUID]:
        """Its heartbeat, connected here, said it runs `running`: those this copy placed (the
        leases to renew), returned; the rest (an attempt whose lease ran out here, or one
        cancelled that is still ending) fill slots until a later heartbeat no longer lists them."""
        mine = [a for a in running if a in self.running]
        self.elsewhere = len(running) - len(mine)
        return mine

    def free(self) -> bool:
        """Whether it could take another attempt now."""
        return len(self.running) + self.elsewhere < self.slots

    def view(self) -> WorkerView:
        """This worker as the allocation policy sees it."""
        return WorkerView(
            worker_id=self.worker_id, tools=self.tools, slots=self.slots,
            running=len(self.running) + self.elsewhere, cpu_percent=self.cpu_percent,
            memory_percent=self.memory_percent, disk_percent=self.disk_percent,
        )


class Fleet:
    """Connected workers by id, at most one connection per worker: those connected here, and
    those connected to other copies (`via`), which count nowhere but in placing work."""

    def __init__(self) -> None:
        self._by_id: dict[uuid.UUID, Connection] = {}
        self._remote = 0  # how many of them are connected to other copies
        self.joined = asyncio.Event()  # set once any worker has connected

    def add(self, conn: Connection) -> Connection | None:
        """Register a connection here; returns the one it replaces, if any (a connection to
        another copy is replaced silently: its attempts now count on this one)."""
        old = self._by_id.get(conn.worker_id)
        self._by_id[conn.worker_id] = conn
        self.joined.set()
        if old is not None and old.via is not None:
            self._remote -= 1
            conn.running |= old.running
            return None
        return old

    def add_remote(self, conn: Connection) -> None:
        """Register a worker connected to another copy (replacing an older such entry)."""
        old = self._by_id.get(conn.worker_id)
        if old is not None and old.via is None:
            return  # connected here: that wins
        self._by_id[conn.worker_id] = conn
        if old is None:
            self._remote += 1

    def remove(self, conn: Connection) -> bool:
        """Forget `conn` if it is still the worker's current connection."""
        if self._by_id.get(conn.worker_id) is conn:
            del self._by_id[conn.worker_id]
            if conn.via is not None:
                self._remote -= 1
                return False
            return True
        return False

    def get(self, worker_id: uuid.UUID | None) -> Connection | None:
        """The live connection of a worker, if it is connected here."""
        return self._by_id.get(worker_id) if worker_id is not None else None

    def connections(self) -> list[Connection]:
        """Every live connection."""
        return list(self._by_id.values())

    def silence(self, worker_id: uuid.UUID | None) -> None:
        """An attempt's lease ran out on the worker: it goes last in placing work until it is
        heard from (its expired attempts freed its slots; it would look the freest otherwise)."""
        if (conn := self.get(worker_id)) is not None:
            conn.silent = True

    def has_free_slot(self) -> bool:
        """Whether any worker could take an attempt now."""
        return any(c.free() for c in self._by_id.values())

    def by_state(self) -> list[tuple[str, int]]:
        """How many workers connected here have a free slot (`online`) and how many are full
        (`busy`)."""
        busy = sum(1 for c in self._by_id.values() if c.via is None and not c.free())
        return [("online", len(self) - busy), ("busy", busy)]

    def __len__(self) -> int:
        """How many workers are connected here."""
        return len(self._by_id) - self._remote
