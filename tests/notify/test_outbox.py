"""The outbox: each notification enqueued exactly once from the event log, then claimed for
tries that never overlap, on SQLite and PostgreSQL."""

from __future__ import annotations

import uuid
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from shoal.events import EventType
from shoal.notify import outbox, targets
from shoal.notify.delivery import DeliveryStatus, NotificationType, Outcome, Settled
from shoal.states import TaskStatus
from shoal.store import deletion
from shoal.store.db import Database
from shoal.store.models import utcnow
from tests.notify.harness import (
    add_task,
    add_user,
    add_webhook,
    append,
    completed,
    cursor,
    deliveries,
    event,
    set_email,
)

HOOK = "http://127.0.0.1:9/hook"


async def enqueue(db: Database, *, limit: int = 500, email: bool = True) -> outbox.Enqueued:
    return await db.run_write(lambda conn: outbox.enqueue_from_log(
        conn, now=utcnow(), base_url="http://shoal.test", limit=limit, email=email))


async def claim(db: Database, *, at: Any = None, limit: int = 10, per_webhook: int = 10,
                busy: dict[uuid.UUID, int] | None = None) -> outbox.Claimed:
    return await db.run_write(lambda conn: outbox.claim_due(
        conn, now=at or utcnow(), limit=limit, lease=60, per_webhook=per_webhook,
        busy=busy or {}))


async def test_each_matching_event_goes_once_to_each_target_that_wants_it(db: Database) -> None:
    """Task ends and checkpoints reach every target subscribed to their type, once; other
    events, and a second round over the same log, add nothing."""
    alice = await add_user(db, "alice")
    task = await add_task(db, alice, "Write the report")
    every = await add_webhook(db, alice, HOOK + "/all")
    failures = await add_webhook(db, alice, HOOK + "/failed",
                                 events=[NotificationType.TASK_FAILED])
    await set_email(db, alice, "alice@example.com",
                    events=[NotificationType.CHECKPOINT_WAITING])
    done, _, _, failed, waiting = await append(
        db, completed(task, alice),
        event(EventType.TASK_UPDATE, task, alice, status="in_progress"),
        event(EventType.AGENT_LOG, task, alice, line="hello"),
        event(EventType.TASK_FAILED, task, alice, status="failed", error="boom"),
        event(EventType.CHECKPOINT_READY, task, alice, checkpoint_id="cp1", reason="low_score"))

    first = await enqueue(db)
    again = await enqueue(db)

    rows = await deliveries(db)
    assert {(r.event_seq, r.kind, r.webhook_id) for r in rows} == {
        (done, "webhook", every), (failed, "webhook", every), (waiting, "webhook", every),
        (failed, "webhook", failures), (waiting, "email", None)}
    assert (first.deliveries, again.deliveries) == (5, 0)
    assert await cursor(db) == waiting
    assert all(r.status == "pending" and r.attempts == 0 for r in rows)
    mail = next(r for r in rows if r.kind == "email")
    assert mail.target == "alice@example.com"
    assert mail.payload["checkpoint"] == {"id": "cp1", "reason": "low_score"}


async def test_a_round_that_rolls_back_enqueues_nothing(db: Database) -> None:
    """A crash before the commit leaves neither deliveries nor a moved cursor, so the next
    round enqueues those events, once."""
    alice = await add_user(db, "alice")
    task = await add_task(db, alice)
    await add_webhook(db, alice, HOOK)
    before = await cursor(db)
    (seq,) = await append(db, completed(task, alice))

    def crash_after_enqueueing(conn: sa.Connection) -> None:
        outbox.enqueue_from_log(conn, now=utcnow(), base_url="http://x", limit=10, email=False)
        raise RuntimeError("the process died here")

    with pytest.raises(RuntimeError):
        await db.run_write(crash_after_enqueueing)
    assert await deliveries(db) == []
    assert await cursor(db) == before

    await enqueue(db)
    await enqueue(db)
    assert [r.event_seq for r in await deliveries(db)] == [seq]


async def test_stopping_half_way_and_starting_again_enqueues_each_event_once(
        db: Database) -> None:
    """Rounds that stop at their limit pick up where the last committed one left off."""
    alice = await add_user(db, "alice")
    await add_webhook(db, alice, HOOK)
    tasks = [await add_task(db, alice) for _ in range(7)]
    seqs = await append(db, *(completed(t, alice) for t in tasks))

    first = await enqueue(db, limit=3)
    assert first.more
    assert [r.event_seq for r in await deliveries(db)] == seqs[:3]
    while (await enqueue(db, limit=3)).more:  # a new round, as after a restart
        pass

    assert [r.event_seq for r in await deliveries(db)] == seqs


async def test_nobody_gets_another_users_notifications(db: Database) -> None:
    """A user's targets get their own tasks' notifications only; events of no user (a
    worker's) notify nobody."""
    alice, bob = await add_user(db, "alice"), await add_user(db, "bob")
    alice_task = await add_task(db, alice, "Alice's secret plan")
    bob_task = await add_task(db, bob, "Bob's errand")
    alice_hook = await add_webhook(db, alice, HOOK + "/alice")
    bob_hook = await add_webhook(db, bob, HOOK + "/bob")
    await append(db, completed(alice_task, alice), completed(bob_task, bob),
                 event(EventType.TASK_FAILED, bob_task, None, status="failed"))

    await enqueue(db)

    for hook, user, task in ((alice_hook, alice, alice_task), (bob_hook, bob, bob_task)):
        rows = await deliveries(db, webhook_id=hook)
        assert [(r.user_id, r.task_id) for r in rows] == [(user, task)]
    (bobs,) = await deliveries(db, webhook_id=bob_hook)
    assert "Alice" not in str(bobs.payload)


async def test_a_budget_running_out_is_told_once_per_task(db: Database) -> None:
    """Later snapshots of a task already out of budget notify nobody again."""
    alice = await add_user(db, "alice")
    task = await add_task(db, alice)
    await add_webhook(db, alice, HOOK)
    out = event(EventType.TASK_UPDATE, task, alice, status="budget_exceeded")
    await append(db, out, out)
    await enqueue(db)
    await append(db, out)
    await enqueue(db)
    assert [r.event_type for r in await deliveries(db)] == ["task.budget_exceeded"]


async def test_events_of_users_without_targets_only_move_the_cursor(db: Database) -> None:
    """Nobody subscribed: no delivery, and the cursor passes the events by."""
    alice = await add_user(db, "alice")
    task = await add_task(db, alice)
    (seq,) = await append(db, completed(task, alice))
    done = await enqueue(db)
    assert (done.deliveries, done.cursor, await cursor(db)) == (0, seq, seq)


async def test_email_targets_wait_for_a_server_that_sends_email(db: Database) -> None:
    """Without SMTP settings an email address gets no deliveries."""
    alice = await add_user(db, "alice")
    task = await add_task(db, alice)
    await set_email(db, alice, "alice@example.com")
    await append(db, completed(task, alice))
    assert (await enqueue(db, email=False)).deliveries == 0


async def test_events_after_a_deleted_tail_of_the_log_are_not_missed(db: Database) -> None:
    """Deleting the task whose events end the log (SQLite then hands their seqs out again)
    loses none of the events that follow."""
    alice = await add_user(db, "alice")
    await add_webhook(db, alice, HOOK)
    gone = await add_task(db, alice, status=TaskStatus.COMPLETED)
    await append(db, completed(gone, alice), completed(gone, alice))
    await enqueue(db)
    await db.run_write(lambda conn: deletion.delete_task(conn, gone, alice, now=utcnow()))
    kept = await add_task(db, alice)
    await append(db, completed(kept, alice))

    await enqueue(db)

    assert Counter(r.task_id for r in await deliveries(db)) == {gone: 2, kept: 1}


async def test_a_claim_counts_the_try_and_leases_the_delivery(db: Database) -> None:
    """A claimed delivery is tried once until its lease ends; then it is due again, with the
    next try number."""
    alice = await add_user(db, "alice")
    await add_webhook(db, alice, HOOK)
    await append(db, completed(await add_task(db, alice), alice))
    await enqueue(db)
    now = utcnow()

    first = await claim(db, at=now)
    during = await claim(db, at=now + timedelta(seconds=59))
    after = await claim(db, at=now + timedelta(seconds=61))

    assert [d.attempt for d in first.due] == [1]
    assert during.due == []
    assert during.next_due == now + timedelta(seconds=60)
    assert [d.attempt for d in after.due] == [2]
    assert first.due[0].secret is not None


async def test_a_late_try_cannot_overwrite_a_newer_one(db: Database) -> None:
    """A try whose lease ran out (another copy claimed the delivery since) stores nothing."""
    alice = await add_user(db, "alice")
    await add_webhook(db, alice, HOOK)
    await append(db, completed(await add_task(db, alice), alice))
    await enqueue(db)
    now = utcnow()
    (late,) = (await claim(db, at=now)).due
    (current,) = (await claim(db, at=now + timedelta(seconds=61))).due
    delivered = Settled(DeliveryStatus.DELIVERED, now, now)

    stale = await db.run_write(lambda conn: outbox.record(conn, late, Outcome.ok(200),
                                                          delivered))
    fresh = await db.run_write(lambda conn: outbox.record(conn, current, Outcome.ok(200),
                                                          delivered))

    assert (stale, fresh) == (False, True)
    (row,) = await deliveries(db)
    assert (row.status, row.attempts, row.last_status_code) == ("delivered", 2, 200)


async def test_one_webhook_gets_no_more_than_its_share_of_tries(db: Database) -> None:
    """With a share of one try per webhook, a busy webhook's backlog waits while another
    webhook's delivery is claimed."""
    alice = await add_user(db, "alice")
    slow = await add_webhook(db, alice, HOOK + "/slow", events=[NotificationType.TASK_FAILED])
    other = await add_webhook(db, alice, HOOK + "/other",
                              events=[NotificationType.TASK_COMPLETED])
    task = await add_task(db, alice)
    failed = event(EventType.TASK_FAILED, task, alice, status="failed")
    await append(db, failed, failed, failed, completed(task, alice))
    await enqueue(db)

    first = await claim(db, per_webhook=1)
    busy = await claim(db, per_webhook=1, busy={slow: 1})

    assert sorted(str(d.webhook_id) for d in first.due) == sorted([str(slow), str(other)])
    assert busy.due == []


async def test_a_switched_off_webhook_gets_nothing_more(db: Database) -> None:
    """Its pending deliveries fail when their time comes, and new events skip it."""
    alice = await add_user(db, "alice")
    hook = await add_webhook(db, alice, HOOK)
    task = await add_task(db, alice)
    await append(db, completed(task, alice))
    await enqueue(db)
    async with db.begin() as conn:
        await conn.execute(sa.update(targets.webhooks).values(disabled_at=utcnow()))
    await append(db, completed(task, alice))

    assert (await enqueue(db)).deliveries == 0
    assert (await claim(db)).due == []
    (row,) = await deliveries(db, webhook_id=hook)
    assert (row.status, row.last_error) == ("failed", "The webhook was switched off.")


async def test_deleting_a_user_deletes_their_targets_and_deliveries(db: Database) -> None:
    """Webhooks, the email setting and deliveries go with their user."""
    alice = await add_user(db, "alice")
    await add_webhook(db, alice, HOOK)
    await set_email(db, alice, "alice@example.com")
    await append(db, completed(await add_task(db, alice), alice))
    await enqueue(db)
    async with db.begin() as conn:
        await conn.execute(sa.delete(targets.webhooks.metadata.tables["users"]))
        left = [(await conn.execute(sa.select(sa.func.count()).select_from(t))).scalar()
                for t in (outbox.deliveries, targets.webhooks, targets.emails)]
    assert left == [0, 0, 0]


@pytest.mark.postgres
async def test_copies_claim_different_deliveries(pg_db: Database) -> None:
    """While one copy's claim is still open, another copy claims the rest, not the same."""
    alice = await add_user(pg_db, "alice")
    await add_webhook(pg_db, alice, HOOK)
    task = await add_task(pg_db, alice)
    await append(pg_db, *(completed(task, alice) for _ in range(4)))
    await enqueue(pg_db)
    now = utcnow()
    async with pg_db.engine.connect() as first:
        await first.begin()
        mine = await first.run_sync(lambda conn: outbox.claim_due(
            conn, now=now, limit=2, lease=60, per_webhook=10, busy={}))
        theirs = await claim(pg_db, at=now)
        await first.commit()
    assert len(mine.due) == 2
    assert len(theirs.due) == 2
    assert not {d.id for d in mine.due} & {d.id for d in theirs.due}


@pytest.mark.postgres
async def test_a_copy_skips_the_round_while_another_moves_the_cursor(pg_db: Database) -> None:
    """The cursor row is locked by the copy enqueuing; another copy skips instead of waiting,
    and enqueues nothing twice."""
    alice = await add_user(pg_db, "alice")
    await add_webhook(pg_db, alice, HOOK)
    await append(pg_db, completed(await add_task(pg_db, alice), alice))
    async with pg_db.engine.connect() as first:
        await first.begin()
        await first.run_sync(lambda conn: outbox.enqueue_from_log(
            conn, now=utcnow(), base_url="http://x", limit=10, email=False))
        skipped = await enqueue(pg_db)
        await first.commit()
    assert skipped.skipped
    assert len(await deliveries(pg_db)) == 1


async def test_ended_deliveries_are_forgotten_after_their_keep(db: Database) -> None:
    """Pruning deletes delivered and failed deliveries created before the cut; pending ones
    and newer ones stay."""
    alice = await add_user(db, "alice")
    await add_webhook(db, alice, HOOK)
    task = await add_task(db, alice)
    await append(db, *(completed(task, alice) for _ in range(4)))
    await enqueue(db)
    old, old_pending, new, new_failed = await deliveries(db)
    long_ago = utcnow() - timedelta(days=40)
    async with db.begin() as conn:
        table = outbox.deliveries
        for row, status, created in ((old, "delivered", long_ago), (old_pending, "pending",
                                     long_ago), (new, "delivered", None),
                                     (new_failed, "failed", None)):
            values: dict[str, Any] = {"status": status}
            if created is not None:
                values["created_at"] = created
            await conn.execute(sa.update(table).where(table.c.id == row.id).values(values))

    pruned = await db.run_write(lambda conn: outbox.prune(
        conn, before=utcnow() - timedelta(days=30)))

    assert pruned == 1
    assert {r.id for r in await deliveries(db)} == {old_pending.id, new.id, new_failed.id}
