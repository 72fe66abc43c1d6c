"""What a client socket follows, and what it has sent: the rules by which a client that resumes
never misses an event, and is not sent one twice unless it asks for it.

A socket streams one `Interest` at a time. Each stream goes through the event log in sequence
order; the stretch it went through is a `Span` ("every event of this task, of these types,
after `after` and through `through`, was sent"), and an event of another task sent live
because of `any_task_types` is remembered by its number. `Sent` keeps both, so that a new
subscription can start where the socket already is (`resume_point`) and skip what it has
already sent (`has_sent`). Forgetting is safe: a span or number dropped to bound memory can
only make an event come twice, never go missing.
"""

from __future__ import annotations

import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Any

SPANS = 64  # spans a socket remembers (one per subscription it made)
SINGLES = 1024  # live events of other tasks a socket remembers sending


@dataclass(frozen=True, slots=True)
class Interest:
    """One subscription: its event types, its task (None: every task of the user's), the types
    wanted live from every task, and whether events may come together in `batch` frames."""

    types: frozenset[str]
    task_id: uuid.UUID | None = None
    also: frozenset[str] = frozenset()
    batch: bool = False
    task: str | None = field(init=False, compare=False, repr=False)  # task_id as events carry it

    def __post_init__(self) -> None:
        object.__setattr__(self, "task", None if self.task_id is None else str(self.task_id))

    def wants(self, item: dict[str, Any]) -> bool:
        """Whether an event of the stream goes to the client."""
        kind = item["type"]
        if kind in self.also:
            return True
        return kind in self.types and (
            self.task is None or item["data"].get("task_id") == self.task)

    def covers(self, other: Interest) -> bool:
        """Whether every event `other` wants of its task is one this interest wants too."""
        return (self.task_id is None or self.task_id == other.task_id) and (
            self.types >= other.types)


@dataclass(slots=True)
class Span:
    """A stretch of the log one stream went through: its events of `interest`'s task and types
    with `after < seq <= through` were sent."""

    interest: Interest
    after: int
    through: int

    def holds(self, seq: int, task: str | None, kind: str) -> bool:
        """Whether the event numbered `seq` (of `task`, of type `kind`) was sent in this span."""
        wanted = self.interest.task is None or task == self.interest.task
        return self.after < seq <= self.through and wanted and kind in self.interest.types


class Sent:
    """The events one socket has sent, as spans and single numbers."""

    def __init__(self) -> None:
        # A list, and the singles' deque made on first use: a socket keeps these for as long as
        # it is open, and an empty deque holds a 64-slot block (0.75 kB).
        self.spans: list[Span] = []
        self._singles: deque[int] | None = None
        self._single_set: set[int] = set()
        self._high = 0  # no span went past this number: a later event was not sent

    def open(self, interest: Interest, after: int) -> Span:
        """Begin the span of a stream of `interest` that starts after `after`."""
        span = Span(interest, after, after)
        self._high = max(self._high, after)
        self.spans.append(span)
        if len(self.spans) > SPANS:
            del self.spans[0]
        return span

    def record_all(self, span: Span, items: list[dict[str, Any]]) -> bool:
        """`items` went through the stream of `span` (sent or not wanted); whether one was its
        `caught_up`. A live-only event (seq 0) is outside the log's order: not recorded."""
        task, caught_up = span.interest.task, False
        for item in items:
            seq = item.get("seq")
            if not seq:
                caught_up = caught_up or item["type"] == "caught_up"
            elif task is None or item["data"].get("task_id") == task:
                if seq > span.through:
                    span.through = seq
            else:
                self.record(span, item)
        self._high = max(self._high, span.through)
        return caught_up

    def record(self, span: Span, item: dict[str, Any]) -> None:
        """`item` (with a sequence number) was sent by the stream of `span`."""
        seq = item["seq"]
        mine = span.interest.task is None or item["data"].get("task_id") == span.interest.task
        if mine:
            span.through = max(span.through, seq)
            self._high = max(self._high, seq)
            return
        if seq not in self._single_set:  # another task's, live for `any_task_types`
            if self._singles is None:
                self._singles = deque(maxlen=SINGLES)
            if len(self._singles) == SINGLES:
                self._single_set.discard(self._singles[0])
            self._singles.append(seq)
            self._single_set.add(seq)

    def advance(self, span: Span, seq: int) -> None:
        """Every event of `span`'s stream through `seq` went through it: `record_all` for a
        stream without `any_task_types`, whose events are all of its task, in O(1)."""
        if seq > span.through:
            span.through = seq
            if seq > self._high:
                self._high = seq

    def nothing_past(self, seq: int) -> bool:
        """Whether no event numbered after `seq` was sent: `has_sent` is False for each."""
        return self._high <= seq and all(single <= seq for single in self._single_set)

    def resume_point(self, interest: Interest, base: int) -> int:
        """Where a stream of `interest` that should start after `base` can start: past every
        stretch right after `base` that a stream covering it already went through."""
        point, moved = base, True
        while moved:
            moved = False
            for span in self.spans:
                if span.after <= point < span.through and span.interest.covers(interest):
                    point, moved = span.through, True
        return point

    def has_sent(self, item: dict[str, Any]) -> bool:
        """Whether this socket has already sent `item`."""
        seq = item.get("seq")
        if not seq:
            return False
        if seq in self._single_set:
            return True
        if seq > self._high:  # past every span: the live events of a stream that keeps up
            return False
        task, kind = item["data"].get("task_id"), item["type"]
        return any(span.holds(seq, task, kind) for span in self.spans)
