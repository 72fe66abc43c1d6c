"""The notifier: two loops beside the runtime, never in its way.

The enqueue loop reads the event log after the notifier's cursor every `notify_poll_interval`
and turns task ends and checkpoints into deliveries (`outbox.enqueue_from_log`, one
transaction a round). The delivery loop claims due deliveries and sends each in a task of its
own, at most `notify_concurrency` at once and `notify_per_webhook` to one webhook, each try
bounded by its sender's timeout: a receiver that fails or hangs holds one slot for one timeout,
while other deliveries go on around it. Neither loop touches the runtime or its inbox.

Run it as one coroutine, `await Notifier(settings, db).run()`, and cancel it to stop (before the
database is disposed): a try cut short is handed back, due at once, for the next copy or the
next start to make again (a copy that dies instead leaves it claimed until its lease runs out).
Deliveries are at least once: a receiver deduplicates on `Shoal-Webhook-Id`.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta

import structlog

from shoal.config import Settings
from shoal.notify import outbox
from shoal.notify.delivery import (
    DueDelivery,
    Outcome,
    Sender,
    TargetKind,
    retry_policy,
    settle,
)
from shoal.notify.email import EmailSender
from shoal.notify.webhooks import WebhookSender
from shoal.store.db import Database
from shoal.store.models import utcnow

log = structlog.get_logger(__name__)
LEASE_MARGIN = 30.0  # seconds a claimed try may outlast its sender's timeout
PRUNE_EVERY = timedelta(hours=1)  # how often ended deliveries past their keep are deleted


class Notifier:
    """Enqueues notifications from the event log and delivers them, until cancelled."""

    def __init__(self, settings: Settings, db: Database, *,
                 clock: Callable[[], datetime] = utcnow,
                 rand: Callable[[], float] = random.random) -> None:
        self._settings = settings
        self._db = db
        self._clock = clock
        self._rand = rand
        self._policy = retry_policy(settings)
        self._email = EmailSender(settings)  # refuses unsafe SMTP settings now, not later
        self._lease = max(settings.webhook_timeout, settings.smtp_timeout) + LEASE_MARGIN
        self._enqueue_wake = asyncio.Event()
        self._deliver_wake = asyncio.Event()
        self._in_flight: dict[uuid.UUID, DueDelivery] = {}  # claimed, outcome not yet stored
        self._cursor_ready = False

    def nudge(self) -> None:
        """Look at the log and the due deliveries now rather than at the next interval."""
        self._enqueue_wake.set()
        self._deliver_wake.set()

    async def run(self) -> None:
        """Enqueue and deliver until cancelled; then hand back the tries cut short."""
        try:
            async with WebhookSender(self._settings) as webhooks, asyncio.TaskGroup() as tg:
                senders: Mapping[TargetKind, Sender] = {TargetKind.WEBHOOK: webhooks,
                                                        TargetKind.EMAIL: self._email}
                tg.create_task(self._enqueue_forever(), name="shoal-notify-enqueue")
                await self._deliver_forever(tg, senders)
        finally:
            await self._hand_back()

    async def _hand_back(self) -> None:
        """Make the tries that never finished due again now, not when their leases end (the
        store may be away: then the leases do it)."""
        cut = list(self._in_flight.values())
        self._in_flight.clear()
        if cut:
            with contextlib.suppress(Exception):
                await self._db.run_write(lambda conn: outbox.release(conn, cut,
                                                                     now=self._clock()))

    # ---- enqueue ----------------------------------------------------------------------------

    async def _enqueue_forever(self) -> None:
        pruned_at: datetime | None = None
        while True:
            try:
                while await self.enqueue_once():
                    pass
                if pruned_at is None or self._clock() - pruned_at > PRUNE_EVERY:
                    pruned_at = self._clock()
                    await self.prune()
            except Exception as exc:  # the store is away: the log waits for the next round
                log.warning("notify.enqueue_failed", error=str(exc))
            await _wait(self._enqueue_wake, self._settings.notify_poll_interval)

    async def prune(self) -> int:
        """Forget the deliveries that ended more than `notify_keep_days` ago; how many."""
        before = self._clock() - timedelta(days=self._settings.notify_keep_days)
        pruned = await self._db.run_write(lambda conn: outbox.prune(conn, before=before))
        if pruned:
            log.info("notify.pruned", deliveries=pruned)
        return pruned

    async def enqueue_once(self) -> bool:
        """One round over the log; whether it stopped at its limit (run it again)."""
        s = self._settings
        if not self._cursor_ready:
            await self._db.run_write(lambda conn: outbox.ensure_cursor(conn, now=self._clock()))
            self._cursor_ready = True
        done = await self._db.run_write(lambda conn: outbox.enqueue_from_log(
            conn, now=self._clock(), base_url=s.base_url, limit=s.notify_batch,
            email=bool(s.smtp_host)))
        if done.deliveries:
            log.info("notify.enqueued", deliveries=done.deliveries, cursor=done.cursor)
            self._deliver_wake.set()
        return done.more

    # ---- deliver ----------------------------------------------------------------------------

    async def _deliver_forever(self, tg: asyncio.TaskGroup,
                               senders: Mapping[TargetKind, Sender]) -> None:
        while True:
            wait = self._settings.notify_poll_interval
            try:
                wait = self._start_tries(tg, senders, await self._claim())
            except Exception as exc:  # the store is away: the deliveries wait
                log.warning("notify.claim_failed", error=str(exc))
            await _wait(self._deliver_wake, wait)

    async def _claim(self) -> outbox.Claimed | None:
        """Claim what this copy has room for (None: no room; a try that ends wakes the loop)."""
        free = self._settings.notify_concurrency - len(self._in_flight)
        if free <= 0:
            return None
        busy = Counter(d.webhook_id for d in self._in_flight.values() if d.webhook_id)
        claim = asyncio.ensure_future(self._db.run_write(lambda conn: outbox.claim_due(
            conn, now=self._clock(), limit=free, lease=self._lease,
            per_webhook=self._settings.notify_per_webhook, busy=busy)))
        try:
            return await asyncio.shield(claim)
        except asyncio.CancelledError:
            # Stopping mid-claim: the claim may commit all the same (SQLite's writer thread
            # finishes it), so what it took joins the tries `run` hands back.
            with contextlib.suppress(Exception):
                self._in_flight.update((d.id, d) for d in (await claim).due)
            raise

    def _start_tries(self, tg: asyncio.TaskGroup, senders: Mapping[TargetKind, Sender],
                     claimed: outbox.Claimed | None) -> float:
        """Start a try per claimed delivery; how long to wait before claiming again."""
        interval = self._settings.notify_poll_interval
        if claimed is None:
            return interval
        for delivery in claimed.due:
            self._in_flight[delivery.id] = delivery
            tg.create_task(self._try(delivery, senders[delivery.kind]),
                           name=f"shoal-notify-{delivery.id}")
        if claimed.due:
            return 0.0  # more may be due: claim again while there is room
        if claimed.next_due is None:
            return interval
        until = (claimed.next_due - self._clock()).total_seconds()
        # Due already but not claimed: its webhook has its share in flight; a try that ends
        # wakes the loop.
        return interval if until <= 0 else min(interval, until)

    async def _try(self, delivery: DueDelivery, sender: Sender) -> None:
        """One try of one delivery and its outcome stored; cancelled, it stays in flight for
        `run` to hand back."""
        outcome = await _send(sender, delivery)
        settled = settle(outcome, attempt=delivery.attempt, policy=self._policy,
                         now=self._clock(), rand=self._rand())
        try:
            stored = await self._db.run_write(
                lambda conn: outbox.record(conn, delivery, outcome, settled))
        except Exception as exc:  # the store is away: the lease brings the delivery back
            log.warning("notify.record_failed", delivery=str(delivery.id), error=str(exc))
        else:
            log.info("notify.tried", delivery=str(delivery.id), kind=delivery.kind.value,
                     attempt=delivery.attempt, status=settled.status.value,
                     code=outcome.status_code, error=outcome.error, stored=stored)
        del self._in_flight[delivery.id]
        self._deliver_wake.set()


async def _send(sender: Sender, delivery: DueDelivery) -> Outcome:
    """The sender's outcome; a sender's own bug becomes a retryable outcome, not a crash."""
    try:
        return await sender.send(delivery)
    except Exception as exc:
        log.exception("notify.sender_failed", delivery=str(delivery.id))
        return Outcome.retry(f"Shoal could not send it: {type(exc).__name__}")


async def _wait(event: asyncio.Event, within: float) -> None:
    """Until `event` is set or `within` seconds pass; clears it."""
    # Not `asyncio.wait_for`: on Python 3.11 it can swallow a cancellation that arrives as
    # the event is set, and the notifier would never stop.
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(within):
            await event.wait()
    event.clear()
