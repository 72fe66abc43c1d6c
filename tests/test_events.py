"""`compact`: one transaction's superseded state snapshots are dropped, nothing else. An
event's wire shape is built and encoded once, for every stream that sends it."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

from shoal.events import Event, EventType, NewEvent, as_json, compact

TASK = uuid.uuid4()


def _sub(sid: str, status: str, **extra: object) -> NewEvent:
    return NewEvent(EventType.SUBTASK_UPDATE, {"subtask_id": sid, "status": status, **extra},
                    task_id=TASK)


def _task(progress: int, **extra: object) -> NewEvent:
    return NewEvent(EventType.TASK_UPDATE, {"status": "in_progress", "progress": progress,
                                            **extra}, task_id=TASK)


def test_a_later_snapshot_of_the_same_subtask_supersedes_an_earlier_one() -> None:
    done, queued, dispatched = _sub("a", "completed"), _sub("b", "queued"), _sub("b", "dispatched")
    progress = _task(50)
    assert compact([done, queued, progress, dispatched]) == [done, progress, dispatched]


def test_task_snapshots_keep_only_the_last_per_task() -> None:
    other = NewEvent(EventType.TASK_UPDATE, {"status": "in_progress", "progress": 1},
                     task_id=uuid.uuid4())
    assert compact([_task(10), other, _task(20)]) == [other, _task(20)]


def test_a_snapshot_with_detail_the_later_one_lacks_is_kept() -> None:
    planned = _task(5, plan=["a", "b"], plan_source="planner")
    assert compact([planned, _task(10)]) == [planned, _task(10)]
    failed = _sub("a", "queued", error="timed out")
    assert compact([failed, _sub("a", "dispatched")]) == [failed, _sub("a", "dispatched")]


def test_other_events_are_never_dropped_or_moved() -> None:
    log = NewEvent(EventType.AGENT_LOG, {"message": "x"}, task_id=TASK)
    complete = NewEvent(EventType.TASK_COMPLETE, {"task_id": str(TASK)}, task_id=TASK)
    events = [log, _sub("a", "queued"), log, _sub("a", "completed"), complete, complete]
    assert compact(events) == [log, log, _sub("a", "completed"), complete, complete]
    assert compact([]) == []


def test_an_event_is_shaped_and_encoded_once_for_every_stream() -> None:
    event = Event(7, EventType.TASK_UPDATE, {"status": "in_progress", "note": "é \" <"},
                  datetime(2026, 11, 27, 5, 0, tzinfo=UTC), task_id=TASK)
    wire = event.wire()
    assert wire is event.wire()
    assert wire == {"type": "task_update", "data": event.data, "seq": 7,
                    "timestamp": "2026-11-27T05:00:00Z"}
    assert as_json(wire) is as_json(event.wire())  # the text too: encoded for the first only
    assert json.loads(as_json(wire)) == wire
    renamed = {**wire, "name": "progress"}  # a copy (a workflow's names) is encoded as it is
    assert json.loads(as_json(renamed)) == renamed
    assert event == Event(7, EventType.TASK_UPDATE, event.data, event.timestamp, task_id=TASK)


def test_an_event_with_its_datas_text_is_sent_with_that_text_not_encoded_again() -> None:
    data = {"status": "in_progress", "note": "é \" <", "n": [1, 2.5, None]}
    text = json.dumps(data)
    event = Event(7, EventType.TASK_UPDATE, data, datetime(2026, 11, 27, 5, 0, tzinfo=UTC),
                  task_id=TASK, text=text)
    wire = event.wire()
    assert as_json(wire) == json.dumps(wire)  # the same bytes as encoding it whole
    assert text in as_json(wire)
    # The text is the event's word for its data: the wire takes it as it is (a stored row's).
    said = Event(8, EventType.TASK_UPDATE, data, event.timestamp, task_id=TASK,
                 text='{"status":"in_progress"}')
    assert json.loads(as_json(said.wire()))["data"] == {"status": "in_progress"}
    assert said.wire()["data"] is data
    assert event == Event(7, EventType.TASK_UPDATE, data, event.timestamp, task_id=TASK)


def test_each_event_carries_its_own_timestamp_when_a_burst_shares_one() -> None:
    """A commit's events share one `now`, formatted once for the burst; an event stamped
    otherwise (an equal instant in another object, another instant, another zone) still gets
    its own."""
    now = datetime(2026, 11, 29, 23, 10, 1, 250000, tzinfo=UTC)

    def event(seq: int, at: datetime) -> Event:
        return Event(seq=seq, type=EventType.TASK_UPDATE, data={}, timestamp=at, task_id=TASK)

    same = [event(seq, now) for seq in (1, 2, 3)]
    assert [e.wire()["timestamp"] for e in same] == ["2026-11-29T23:10:01.250000Z"] * 3
    later = now.replace(second=2)
    elsewhere = datetime.fromisoformat("2026-11-29T23:10:01.250000+01:00")
    others = [event(4, later), event(5, now.replace()), event(6, elsewhere), event(7, now)]
    assert [e.wire()["timestamp"] for e in others] == [
        "2026-11-29T23:10:02.250000Z", "2026-11-29T23:10:01.250000Z",
        "2026-11-29T23:10:01.250000+01:00", "2026-11-29T23:10:01.250000Z"]
    for e in same + others:
        assert json.loads(as_json(e.wire()))["timestamp"] == e.wire()["timestamp"]
