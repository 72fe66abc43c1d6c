"""The event log: sequence numbers in append order, reads filtered by user, task and limit, and
each event's data encoded once, for its row and every stream that sends it."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

from shoal.events import EventType, NewEvent, as_json
from shoal.store.db import Database
from shoal.store.events import append_events, append_events_sync, events_since, last_seq

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
ALICE, BOB = uuid.uuid4(), uuid.uuid4()
TASK_A, TASK_B = uuid.uuid4(), uuid.uuid4()


def event(n: int, *, user: uuid.UUID | None, task: uuid.UUID | None) -> NewEvent:
    return NewEvent(EventType.TASK_UPDATE, {"n": n}, task_id=task, user_id=user)


async def seed(db: Database) -> None:
    """Events 0..5 for Alice's task A, Bob's task B, and everyone (no user)."""
    async with db.begin() as conn:
        await append_events(
            conn,
            [
                event(0, user=ALICE, task=TASK_A),
                event(1, user=BOB, task=TASK_B),
                event(2, user=None, task=None),
                event(3, user=ALICE, task=TASK_A),
            ],
            NOW,
        )
    async with db.begin() as conn:
        await append_events(
            conn, [event(4, user=BOB, task=TASK_B), event(5, user=ALICE, task=TASK_A)], NOW
        )


async def test_append_returns_increasing_seqs_in_order(db: Database) -> None:
    """Appended events come back in the order given, with increasing sequence numbers."""
    async with db.begin() as conn:
        first = await append_events(
            conn, [event(n, user=ALICE, task=TASK_A) for n in range(3)], NOW
        )
    async with db.begin() as conn:
        second = await append_events(conn, [event(3, user=None, task=None)], NOW)
        assert await append_events(conn, [], NOW) == []
    stored = [*first, *second]
    assert [e.data["n"] for e in stored] == [0, 1, 2, 3]
    seqs = [e.seq for e in stored]
    assert seqs == sorted(set(seqs))
    async with db.connection() as conn:
        assert await last_seq(conn) == seqs[-1]


async def test_events_since_shows_own_and_public_events(db: Database) -> None:
    """A user sees their own events and those without a user, oldest first."""
    await seed(db)
    async with db.connection() as conn:
        alice = await events_since(conn, 0, user_id=ALICE)
        bob = await events_since(conn, 0, user_id=BOB)
    assert [e.data["n"] for e in alice] == [0, 2, 3, 5]
    assert [e.data["n"] for e in bob] == [1, 2, 4]
    assert [e.seq for e in alice] == sorted(e.seq for e in alice)


async def test_events_since_filters_by_task(db: Database) -> None:
    """With a task id only that task's events are returned."""
    await seed(db)
    async with db.connection() as conn:
        only_a = await events_since(conn, 0, user_id=ALICE, task_id=TASK_A)
        b_for_alice = await events_since(conn, 0, user_id=ALICE, task_id=TASK_B)
    assert [e.data["n"] for e in only_a] == [0, 3, 5]
    assert b_for_alice == []


async def test_events_since_respects_since_and_limit(db: Database) -> None:
    """Reading after a seq returns the next `limit` visible events, no more."""
    await seed(db)
    async with db.connection() as conn:
        everything = await events_since(conn, 0, user_id=ALICE)
        page = await events_since(conn, everything[0].seq, user_id=ALICE, limit=2)
    assert [e.data["n"] for e in page] == [2, 3]


async def test_a_large_append_through_the_writer_keeps_order(db: Database) -> None:
    """Through the runtime's write path, 1,200 events (several statements' worth) come back
    with consecutive sequence numbers in the order given, and read back in that order."""
    new = [event(n, user=ALICE, task=TASK_A) for n in range(1200)]
    stored = await db.run_write(lambda conn: append_events_sync(conn, new, NOW), inline=True)
    seqs = [e.seq for e in stored]
    assert seqs == list(range(seqs[0], seqs[0] + 1200))
    assert [e.data["n"] for e in stored] == list(range(1200))
    async with db.connection() as conn:
        back = await events_since(conn, seqs[0] - 1, user_id=ALICE, limit=2000)
    assert [(e.seq, e.data["n"]) for e in back] == [(e.seq, e.data["n"]) for e in stored]


async def test_an_events_data_is_encoded_once_and_sent_as_stored(db: Database) -> None:
    """An appended event carries its data's JSON text as its row was written, and its wire
    text is built around that text: the same bytes `json.dumps` gives the wire, live and
    replayed. On SQLite, which stores the text as it was given, a replayed event has it too."""
    data = {"note": "é \" <\n\u2028", "n": [1, 2.5, None, True, -0.0, 1e-07],
            "nested": {"k": "v", "empty": {}}, "subtask_id": str(TASK_A)}
    async with db.begin() as conn:
        [live] = await append_events(
            conn, [NewEvent(EventType.SUBTASK_UPDATE, data, task_id=TASK_A, user_id=ALICE)],
            NOW)
    async with db.connection() as conn:
        [again] = await events_since(conn, live.seq - 1, user_id=ALICE)
    assert live.text == json.dumps(data)
    assert again.text == (live.text if db.engine.dialect.name == "sqlite" else None)
    for event in (live, again):
        assert event.data == data
        assert as_json(event.wire()) == json.dumps(event.wire())
    assert json.loads(as_json(again.wire())) == json.loads(as_json(live.wire()))
