"""Which Redis channels one copy's listener hears, and which of them Redis has confirmed.

A `RedisBus` subscribes its pub/sub connection to a task's channel while a subscription of this
copy follows that task, and to the deployment's channel while one follows every event (ADR
0043). Subscriptions come and go while the listener reads, so the channels held are steered
towards the channels wanted, one batch of SUBSCRIBE and UNSUBSCRIBE commands at a time, and a
channel counts as live only once Redis has confirmed the last SUBSCRIBE sent for it: from then
on every message published to it reaches this copy, so a reader that subscribed and then
replays the store misses nothing.
"""

from __future__ import annotations

import asyncio
from collections import Counter


class Interest:
    """A channel some subscriptions here want: how many, and whether Redis confirmed it on
    the current connection (`live`)."""

    __slots__ = ("count", "live")

    def __init__(self) -> None:
        self.count = 0
        self.live = asyncio.Event()


class Channels:
    """The channels wanted (by local subscriptions), held (sent to Redis on the current
    connection) and still unconfirmed there."""

    def __init__(self) -> None:
        self.wanted: dict[str, Interest] = {}
        self.held: set[str] = set()
        self._unconfirmed: Counter[str] = Counter()
        self.changed = asyncio.Event()  # set when `plan` has something to do

    def want(self, channel: str) -> Interest:
        """One more subscription wants `channel`; its interest (live once confirmed)."""
        interest = self.wanted.get(channel)
        if interest is None:
            interest = self.wanted[channel] = Interest()
        interest.count += 1
        if channel not in self.held:
            self.changed.set()
        return interest

    def unwant(self, channel: str) -> None:
        """One subscription no longer wants `channel` (given up when nobody does)."""
        interest = self.wanted.get(channel)
        if interest is None:  # (the connection was reset meanwhile: nothing is held)
            return
        interest.count -= 1
        if interest.count <= 0:
            if channel in self.held:
                self.changed.set()
            else:
                del self.wanted[channel]

    def plan(self) -> tuple[list[str], list[str]]:
        """The channels to subscribe to and to unsubscribe from now, recorded as sent."""
        add = [ch for ch, interest in self.wanted.items()
               if interest.count > 0 and ch not in self.held]
        drop = [ch for ch in self.held if self.wanted[ch].count <= 0]
        for ch in drop:
            self.held.discard(ch)
            del self.wanted[ch]
        for ch in add:
            self.held.add(ch)
            self._unconfirmed[ch] += 1
        return add, drop

    def confirmed(self, channel: str) -> bool:
        """Redis confirmed a SUBSCRIBE to `channel`: whether one was awaited. The channel is
        live once the last one sent is confirmed. False: a confirmation nobody asked for
        (the client reconnected and subscribed again by itself, so messages may be lost)."""
        left = self._unconfirmed[channel]
        if left <= 0:
            del self._unconfirmed[channel]
            return False
        if left == 1:
            del self._unconfirmed[channel]
            if channel in self.held:
                self.wanted[channel].live.set()
        else:
            self._unconfirmed[channel] = left - 1
        return True

    def reset(self) -> None:
        """The connection is gone: nothing is held or live; what is wanted is asked again."""
        self.held.clear()
        self._unconfirmed.clear()
        for channel, interest in list(self.wanted.items()):
            interest.live.clear()
            if interest.count <= 0:
                del self.wanted[channel]
        if self.wanted:
            self.changed.set()

    def release_waiters(self) -> None:
        """Wake every subscription waiting for its channel (the bus is closing)."""
        for interest in self.wanted.values():
            interest.live.set()
