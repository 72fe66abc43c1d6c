"""Real tasks on a real control plane and worker, a notifier beside them, real receivers: users
hear when their tasks end, and a broken or hanging receiver slows neither the tasks nor
anyone else's notifications."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from shoal.api.server import RunningServer, running_server
from shoal.config import Settings
from shoal.notify.delivery import NotificationType
from shoal.store import accounts
from tests.notify.harness import add_webhook, fast, running_notifier
from tests.notify.receivers import as_json, header, webhook_receiver
from tests.runtime.harness import echo_worker, login, submit, wait_for_status, wait_until

ECHO = [{"name": "a", "description": "x", "tool": "echo"}]
FAILS = [{"name": "a", "description": "x", "tool": "echo", "options": {"fail": True}}]


@pytest.fixture
def settings(tmp_path: Path, database_url: str) -> Settings:
    """Quick notifier settings, on SQLite and on PostgreSQL; a webhook timeout far above how
    long the tests' tasks take."""
    return fast(tmp_path, database_url=database_url, webhook_timeout=30.0)


@pytest.fixture
async def server(settings: Settings) -> AsyncIterator[RunningServer]:
    """A control plane with an echo worker."""
    async with running_server(settings) as srv, echo_worker(srv, settings):
        yield srv


async def signed_in(srv: RunningServer, settings: Settings,
                    name: str) -> tuple[httpx.AsyncClient, uuid.UUID]:
    """A new user's client and id."""
    client = await login(srv, settings, name)
    async with srv.services.db.connection() as conn:
        row = await accounts.user_by_name(conn, name)
    assert row is not None
    return client, uuid.UUID(str(row.id))


async def test_users_hear_when_their_tasks_complete_or_fail(
        server: RunningServer, settings: Settings) -> None:
    """A completed and a failed task reach their owner's webhook, with the task's id,
    description, status (and error); another user's webhook hears of their own task only."""
    db = server.services.db
    async with webhook_receiver() as rx, running_notifier(settings, db):
        alice, alice_id = await signed_in(server, settings, "alice")
        bob, bob_id = await signed_in(server, settings, "bob")
        await add_webhook(db, alice_id, rx.endpoint("/alice"))
        await add_webhook(db, bob_id, rx.endpoint("/bob"),
                          events=[NotificationType.TASK_COMPLETED])
        done = await submit(alice, ECHO, description="Echo for alice")
        failed = await submit(alice, FAILS, description="Fail for alice")
        mine = await submit(bob, ECHO, description="Echo for bob")
        for client, task in ((alice, done), (alice, failed), (bob, mine)):
            await wait_for_status(client, task, "completed", "failed")
        got = await wait_until(rx.got("/alice", 2), what="alice's two notifications")
        (bobs,) = await wait_until(rx.got("/bob"), what="bob's notification")
        for client in (alice, bob):
            await client.aclose()

    bodies = {as_json(r)["task"]["id"]: as_json(r) for r in got}
    assert bodies[done]["type"] == "task.completed"
    assert bodies[done]["task"]["description"] == "Echo for alice"
    assert bodies[failed]["type"] == "task.failed"
    assert bodies[failed]["task"]["status"] == "failed"
    assert "failed on purpose" in bodies[failed]["task"]["error"]
    assert as_json(bobs)["task"]["id"] == mine
    assert all(header(r, "Shoal-Event") == as_json(r)["type"] for r in [*got, bobs])


async def test_broken_and_hanging_receivers_slow_neither_tasks_nor_other_users(
        server: RunningServer, settings: Settings) -> None:
    """While alice's receivers answer 500 (tried again and again) and hang (a 30 s timeout),
    her tasks run one after another at full speed and bob's notification arrives, all before
    the hanging request has even timed out."""
    db = server.services.db
    async with webhook_receiver() as rx, running_notifier(settings, db):
        rx.answers["/broken"] = [500]
        rx.hang.add("/hang")
        alice, alice_id = await signed_in(server, settings, "alice")
        bob, bob_id = await signed_in(server, settings, "bob")
        await add_webhook(db, alice_id, rx.endpoint("/broken"))
        await add_webhook(db, alice_id, rx.endpoint("/hang"))
        await add_webhook(db, bob_id, rx.endpoint("/fine"))

        first = await submit(alice, ECHO)
        await wait_for_status(alice, first, "completed")
        await wait_until(lambda: rx.open_hangs, what="alice's receiver to hang")
        started = time.monotonic()
        for _ in range(5):  # one after another: each must finish without waiting on webhooks
            await wait_for_status(alice, await submit(alice, ECHO), "completed")
        tasks_took = time.monotonic() - started
        theirs = await submit(bob, ECHO)
        await wait_for_status(bob, theirs, "completed")
        (fine,) = await wait_until(rx.got("/fine"), what="bob's notification")
        await wait_until(rx.got("/broken", 2), what="the broken one's retry")
        hanging_still = rx.open_hangs
        for client in (alice, bob):
            await client.aclose()

    assert hanging_still >= 1
    assert tasks_took < settings.webhook_timeout
    assert as_json(fine)["task"]["id"] == theirs

