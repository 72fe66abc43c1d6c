"""The notifier against real webhook receivers: signed deliveries, retries with backoff, a
failing or hanging receiver that holds up nobody else, and exactly-once enqueueing across
restarts, on SQLite and PostgreSQL."""

from __future__ import annotations

import itertools
import time
from collections import Counter
from pathlib import Path
from typing import Any

from shoal.notify.signing import verify_signature
from shoal.store.db import Database
from tests.notify.harness import (
    BASE,
    FACTOR,
    JITTER,
    SECRET,
    add_task,
    add_user,
    add_webhook,
    append,
    completed,
    deliveries,
    delivery,
    fast,
    running_notifier,
)
from tests.notify.receivers import as_json, header, webhook_receiver
from tests.runtime.harness import wait_until


async def settled(db: Database, delivery_id: str, status: str) -> Any:
    """Wait until the delivery reaches `status`; its row."""
    async def reached() -> Any:
        row = await delivery(db, delivery_id)
        return row if row is not None and row.status == status else None
    return await wait_until(reached, what=f"delivery {delivery_id} to be {status}")


async def test_a_receiver_gets_a_signed_notification_it_can_verify(
        db: Database, tmp_path: Path) -> None:
    """The POST carries the documented headers; its signature verifies with the secret; the
    body names the task; the delivery is recorded as delivered on the first try."""
    async with webhook_receiver() as rx:
        alice = await add_user(db, "alice")
        task = await add_task(db, alice, "Write the report")
        await add_webhook(db, alice, rx.endpoint("/hook"))
        async with running_notifier(fast(tmp_path), db):
            await append(db, completed(task, alice))
            (request,) = await wait_until(rx.got("/hook"), what="the notification")
            row = await settled(db, header(request, "Shoal-Webhook-Id"), "delivered")

    signed_at = verify_signature(SECRET, request.body, header(request, "Shoal-Signature"),
                                 now=time.time())
    assert abs(signed_at - time.time()) < 60
    body = as_json(request)
    assert header(request, "Content-Type") == "application/json"
    assert header(request, "Shoal-Event") == body["type"] == "task.completed"
    assert header(request, "Shoal-Attempt") == "1"
    assert body["id"] == str(row.id)
    assert body["task"] == {"id": str(task), "description": "Write the report",
                            "status": "completed", "url": f"https://shoal.test/tasks/{task}"}
    assert (row.attempts, row.last_status_code, row.last_error) == (1, 200, None)
    assert row.delivered_at is not None


async def test_a_failing_receiver_is_retried_with_backoff_then_given_up_while_others_are_served(
        db: Database, tmp_path: Path) -> None:
    """A receiver answering 500 gets every try, each later than the one before by the
    backoff, then the delivery fails; another user's receiver got theirs at once."""
    async with webhook_receiver() as rx:
        rx.answers["/broken"] = [500]
        alice, bob = await add_user(db, "alice"), await add_user(db, "bob")
        await add_webhook(db, alice, rx.endpoint("/broken"))
        await add_webhook(db, bob, rx.endpoint("/fine"))
        async with running_notifier(fast(tmp_path), db):
            await append(db, completed(await add_task(db, alice), alice),
                         completed(await add_task(db, bob), bob))
            tries = await wait_until(rx.got("/broken", 4), what="four tries")
            row = await settled(db, header(tries[0], "Shoal-Webhook-Id"), "failed")

    assert [header(r, "Shoal-Attempt") for r in tries] == ["1", "2", "3", "4"]
    assert len({header(r, "Shoal-Webhook-Id") for r in tries}) == 1  # one notification
    gaps = [later.at - earlier.at for earlier, later in itertools.pairwise(tries)]
    for n, gap in enumerate(gaps):
        nominal = BASE * FACTOR ** n
        assert nominal * (1 - JITTER) - 0.02 <= gap <= nominal * (1 + JITTER) + 1.0, gaps
    (fine,) = rx.at("/fine")
    assert fine.at < tries[1].at  # served before the broken one's first retry
    assert (row.attempts, row.last_status_code) == (4, 500)
    assert row.last_error == "HTTP 500 Internal Server Error"
    assert row.next_attempt_at is not None


async def test_408_429_and_5xx_are_retried_until_a_2xx(db: Database, tmp_path: Path) -> None:
    """Answers that may change (503, 429, 408) are tried again; the 2xx after them delivers."""
    async with webhook_receiver() as rx:
        rx.answers["/flaky"] = [503, 429, 408, 204]
        alice = await add_user(db, "alice")
        await add_webhook(db, alice, rx.endpoint("/flaky"))
        async with running_notifier(fast(tmp_path, notify_retry_base=0.05), db):
            await append(db, completed(await add_task(db, alice), alice))
            first = (await wait_until(rx.got("/flaky"), what="a try"))[0]
            row = await settled(db, header(first, "Shoal-Webhook-Id"), "delivered")
    assert (row.attempts, row.last_status_code) == (4, 204)


async def test_a_4xx_answer_ends_the_delivery_at_once(db: Database, tmp_path: Path) -> None:
    """A 404 (the receiver does not want it) is not tried again."""
    async with webhook_receiver() as rx:
        rx.answers["/gone"] = [404]
        alice = await add_user(db, "alice")
        await add_webhook(db, alice, rx.endpoint("/gone"))
        async with running_notifier(fast(tmp_path, notify_retry_base=0.05), db):
            await append(db, completed(await add_task(db, alice), alice))
            (request,) = await wait_until(rx.got("/gone"), what="a try")
            row = await settled(db, header(request, "Shoal-Webhook-Id"), "failed")
    assert len(rx.at("/gone")) == 1
    assert (row.attempts, row.last_status_code, row.last_error) == (
        1, 404, "HTTP 404 Not Found")


async def test_a_hanging_receiver_times_out_and_holds_up_nobody(
        db: Database, tmp_path: Path) -> None:
    """A receiver that never answers is given up after the timeout on each try; meanwhile
    another user's notification arrives while the hanging request is still open."""
    async with webhook_receiver() as rx:
        rx.hang.add("/hang")
        alice, bob = await add_user(db, "alice"), await add_user(db, "bob")
        await add_webhook(db, alice, rx.endpoint("/hang"))
        await add_webhook(db, bob, rx.endpoint("/fine"))
        settings = fast(tmp_path, webhook_timeout=0.5, notify_max_attempts=2,
                        notify_concurrency=2, notify_per_webhook=1)
        async with running_notifier(settings, db):
            await append(db, completed(await add_task(db, alice), alice))
            (hanging,) = await wait_until(rx.got("/hang"), what="the hanging request")
            await append(db, completed(await add_task(db, bob), bob))
            await wait_until(rx.got("/fine"), what="bob's notification")
            open_then = rx.open_hangs
            row = await settled(db, header(hanging, "Shoal-Webhook-Id"), "failed")
    assert open_then >= 1  # bob was served while alice's receiver still hung
    assert len(rx.at("/hang")) == 2
    assert (row.attempts, row.last_status_code, row.last_error) == (
        2, None, "No answer within 0.5 s.")


async def test_stopping_the_notifier_half_way_loses_and_repeats_nothing(
        db: Database, tmp_path: Path) -> None:
    """A notifier cancelled mid-stream (as at shutdown) and started again enqueues every
    notification once and delivers each; tries cut short are handed back at once."""
    settings = fast(tmp_path, notify_batch=2)
    async with webhook_receiver() as rx:
        alice = await add_user(db, "alice")
        await add_webhook(db, alice, rx.endpoint("/hook"))
        task = await add_task(db, alice)
        seqs = await append(db, *(completed(task, alice) for _ in range(9)))
        async with running_notifier(settings, db):
            await wait_until(lambda: len(rx.requests) >= 2, what="the first deliveries")
        async with running_notifier(settings, db):
            await wait_until(lambda: len({header(r, "Shoal-Webhook-Id")
                                          for r in rx.requests}) == 9,
                             what="every notification")
            rows = await wait_until(_all_delivered(db, 9), what="every delivery recorded")
    assert sorted(r.event_seq for r in rows) == seqs


async def test_two_copies_side_by_side_enqueue_and_deliver_each_notification_once(
        db: Database, tmp_path: Path) -> None:
    """Two notifiers on one database (two control-plane copies) split the work: one delivery
    per notification, each delivered."""
    settings = fast(tmp_path, notify_batch=3)
    async with webhook_receiver() as rx:
        alice = await add_user(db, "alice")
        await add_webhook(db, alice, rx.endpoint("/hook"))
        task = await add_task(db, alice)
        async with running_notifier(settings, db), running_notifier(settings, db):
            seqs: list[int] = []
            for _ in range(4):
                seqs += await append(db, *(completed(task, alice) for _ in range(5)))
            rows = await wait_until(_all_delivered(db, 20), what="every delivery")
    assert sorted(r.event_seq for r in rows) == seqs
    assert Counter(header(r, "Shoal-Webhook-Id") for r in rx.requests).most_common(1)[0][1] == 1


def _all_delivered(db: Database, count: int) -> Any:
    async def check() -> Any:
        rows = await deliveries(db)
        return rows if len(rows) == count and all(r.status == "delivered" for r in rows) else None
    return check
