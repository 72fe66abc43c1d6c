"""The `EventBus` port.

After a transaction commits, the runtime publishes its events; every subscriber (client
WebSockets, SSE streams, other control-plane copies) receives them in publish order. The bus is
not the source of truth: a subscriber that falls behind is told so (`Lagged`) and re-reads the
gap from the store.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Protocol

from shoal.errors import ShoalError
from shoal.events import Event


class Lagged(ShoalError):
    """Raised from a subscription that overflowed; the reader must resync from the store."""

    code = "lagged"


class Subscription(Protocol):
    """A stream of published events, in order."""

    def __aiter__(self) -> AsyncIterator[Event]:
        """Iterate events as they are published; raises `Lagged` after an overflow."""
        ...


class EventBus(Protocol):
    """Publish committed events; subscribe to everything published from now on."""

    async def publish(self, events: Sequence[Event]) -> None:
        """Deliver `events` to every current subscriber (here and on other instances)."""
        ...

    def subscribe(self) -> AbstractAsyncContextManager[Subscription]:
        """A subscription that receives every event published after it opens."""
        ...

    async def ping(self) -> bool:
        """Whether the bus can deliver events now (readiness)."""
        ...

    async def close(self) -> None:
        """Release connections and end every subscription."""
        ...
