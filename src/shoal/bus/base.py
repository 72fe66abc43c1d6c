"""The `EventBus` port.

After a transaction commits, the runtime publishes its events; every subscriber (client
WebSockets, SSE streams, other control-plane copies) receives them in publish order. The bus is
not the source of truth: a subscriber that falls behind is told so (`Lagged`) and re-reads the
gap from the store.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Protocol

from shoal.errors import ShoalError
from shoal.events import Event


class Lagged(ShoalError):
    """Raised from a subscription that overflowed; the reader must resync from the store."""

    code = "lagged"


class Subscription(Protocol):
    """A stream of published events, in order. One routed to a task may miss events whose
    numbers are at most `gap_through` (a gap the bus saw in the log's order): its reader
    fills what it lacks below that from the store."""

    gap_through: int
    # Set by the subscription's one reader to take events in the publisher's own turn: called
    # with what would be queued while nothing is; True if it took them (nothing is queued).
    inline: Callable[[Sequence[Event]], bool] | None

    def __aiter__(self) -> AsyncIterator[Event]:
        """Iterate events as they are published; raises `Lagged` after an overflow."""
        ...

    def empty(self) -> bool:
        """Whether nothing is queued: every event delivered so far has been taken."""
        ...

    async def take(self, limit: int) -> list[Event]:
        """The events queued now (at most `limit`, waiting for one if none is); `[]` once
        the subscription ended, `Lagged` after an overflow."""
        ...


class EventBus(Protocol):
    """Publish committed events; subscribe to everything published from now on."""

    async def publish(self, events: Sequence[Event]) -> None:
        """Deliver `events` to every current subscriber (here and on other instances)."""
        ...

    def subscribe(
        self, task_id: uuid.UUID | None = None
    ) -> AbstractAsyncContextManager[Subscription]:
        """A subscription that receives every event published after it opens (only the events
        of task `task_id`, if given: events go only where they are wanted)."""
        ...

    async def ping(self) -> bool:
        """Whether the bus can deliver events now (readiness)."""
        ...

    async def close(self) -> None:
        """Release connections and end every subscription."""
        ...
