"""Event types and the event value every stream carries.

Events are append-only, numbered by a global sequence (`seq`) assigned by the store when the
transaction that produced them commits. Clients see `{type, data, timestamp, seq}`.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any


class EventType(StrEnum):
    """Every kind of event Shoal appends. The seed's seven are the minimum."""

    TASK_CREATED = "task_created"  # a task was submitted: its description, workflow, budget
    TASK_UPDATE = "task_update"  # the task's whole state, as its status or stage changes
    SUBTASK_UPDATE = "subtask_update"  # a subtask's whole state: created, started, done, …
    WORKER_UPDATE = "worker_update"  # a worker came, went, or changed state
    CHECKPOINT_READY = "checkpoint_ready"  # a person is asked: approve, answer, decide
    CHECKPOINT_DECIDED = "checkpoint_decided"  # a person decided a checkpoint
    EVALUATION = "evaluation"  # a subtask's output was scored
    REVIEW = "review"  # a peer review's verdict
    TASK_COMPLETE = "task_complete"  # the task completed: its result, what it used
    TASK_FAILED = "task_failed"  # the task failed (or ran out of budget), and why
    TASK_CANCELLED = "task_cancelled"  # someone cancelled the task
    AGENT_LOG = "agent_log"  # what an agent did: a tool call, a command, a line of output
    NOTICE = "notice"  # something a person should know: planner fallback, rejected files
    STATE_UPDATE = "state_update"  # a workflow document's blackboard entry has a new revision
    ROUTE_DECISION = "route_decision"  # a route step chose the next step (and who chose it)
    PHASE = "phase"  # a task with a typed plan moved to another phase (planning, executing, …)
    STAGE = "stage"  # a task moved to another of its document's declared stages
    MESSAGE = "message"  # hand-overs a new run of a workflow receives (its message log)
    AGENT_TOKEN = "agent_token"  # model text as it streams: live only (`seq` 0, never stored)


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event decided but not yet stored (no sequence number yet)."""

    type: EventType
    data: dict[str, Any]
    task_id: uuid.UUID | None = None
    user_id: uuid.UUID | None = None  # None: visible to every signed-in user (worker events)


# The last timestamp `Event.wire` wrote, with its text: a commit's events are stamped with one
# datetime, so a burst formats it once rather than once an event.
_LAST_STAMP: tuple[datetime | None, str] = (None, "")


class Wire(dict[str, Any]):
    """An event in the shape clients receive, shared by every stream that sends it (never
    change one): its JSON text is encoded once, for the first socket, and reused."""

    __slots__ = ("_text",)

    @property
    def text(self) -> str:
        """The event as JSON."""
        try:
            return self._text
        except AttributeError:
            self._text: str = json.dumps(self)
            return self._text


def as_json(item: Mapping[str, Any]) -> str:
    """`item` as JSON: an event's text encoded once, anything else now."""
    return item.text if type(item) is Wire else json.dumps(item)


@dataclass(frozen=True, slots=True)
class Event:
    """A stored event with its global sequence number."""

    seq: int
    type: EventType
    data: dict[str, Any]
    timestamp: datetime
    task_id: uuid.UUID | None = None
    user_id: uuid.UUID | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # `data` as JSON text, when it is known: exactly `json.dumps(data)`, as the event's row was
    # written (so the wire's text is built around it, not encoded again). None: not known.
    text: str | None = field(default=None, compare=False, repr=False)
    _wire: Wire | None = field(default=None, init=False, compare=False, repr=False)

    def wire(self) -> Wire:
        """The shape clients receive: built once, then shared by every stream (never change
        it; copy it to rename or add fields). With the data's `text` known, the wire's own
        text is that text with the other fields around it: the same bytes `json.dumps` gives
        the wire, without encoding the data a second time."""
        global _LAST_STAMP
        wire = self._wire
        if wire is None:
            kind = self.type._value_  # `.value` without the property's two calls
            at, stamp = _LAST_STAMP
            if self.timestamp is not at:  # the events of one commit share their `now`
                at = self.timestamp
                stamp = at.isoformat().replace("+00:00", "Z")
                _LAST_STAMP = (at, stamp)  # one tuple: read whole in any thread
            wire = Wire(type=kind, data=self.data, timestamp=stamp, seq=self.seq)
            if self.text is not None:  # (a type's value and a timestamp need no escaping)
                wire._text = (f'{{"type": "{kind}", "data": {self.text}, '
                              f'"timestamp": "{stamp}", "seq": {self.seq}}}')
            object.__setattr__(self, "_wire", wire)
        return wire

    @property
    def live_only(self) -> bool:
        """Published but never stored (`agent_token`): no sequence number, no replay."""
        return self.seq == 0

    def visible_to(self, user_id: uuid.UUID) -> bool:
        """Whether this user may see the event."""
        return self.user_id is None or self.user_id == user_id


_SNAPSHOTS = frozenset({EventType.TASK_UPDATE, EventType.SUBTASK_UPDATE})


def _snapshot_key(event: NewEvent) -> tuple[Any, ...] | None:
    """What a state snapshot describes (its task, or its subtask); None for other events."""
    if event.type not in _SNAPSHOTS:
        return None
    if event.type is EventType.SUBTASK_UPDATE:
        return (event.type, event.data.get("subtask_id"))
    return (event.type, event.task_id)


def compact(events: list[NewEvent]) -> list[NewEvent]:
    """`events` of one transaction without the snapshots a later one there supersedes.

    A `task_update` or `subtask_update` carries the whole state of its task or subtask, and
    only committed state is ever visible: a subtask queued and dispatched in one transaction
    was never durably "queued", so its first snapshot says nothing the second does not. It is
    dropped when the later snapshot of the same task or subtask has every key it has (so no
    extra detail, such as a plan, is lost). Everything else keeps its place (ADR 0015).
    """
    keys = [_snapshot_key(event) for event in events]
    last: dict[tuple[Any, ...], int] = {}
    for i, key in enumerate(keys):
        if key is not None:
            last[key] = i
    out: list[NewEvent] = []
    for i, event in enumerate(events):
        key = keys[i]
        later = last[key] if key is not None else i
        if later != i and event.data.keys() <= events[later].data.keys():
            continue
        out.append(event)
    return out
