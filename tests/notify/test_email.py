"""Notifications by email, sent to a real SMTP server (aiosmtpd): plain, STARTTLS with a
certificate checked against the configured CA, and a relay's refusal."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from shoal.events import EventType
from shoal.notify import Notifier
from shoal.notify.delivery import DueDelivery, NotificationType, TargetKind
from shoal.notify.email import EmailSender, compose
from shoal.store.db import Database
from tests.notify.harness import (
    add_task,
    add_user,
    append,
    completed,
    deliveries,
    event,
    fast,
    running_notifier,
    set_email,
)
from tests.notify.receivers import self_signed, smtp_server
from tests.runtime.harness import wait_until

PAYLOAD = {"id": "d-1", "type": "task.failed", "created_at": "2026-11-28T10:00:00Z",
           "task": {"id": "t-1", "description": "Write\nthe   quarterly report for the board "
                                                "of directors, with charts",
                    "status": "failed", "url": "https://shoal.test/tasks/t-1",
                    "error": "No worker could run it."}}


def due(payload: dict[str, Any], to: str = "ada@example.com") -> DueDelivery:
    return DueDelivery(id=uuid.uuid4(), kind=TargetKind.EMAIL, target=to, secret=None,
                       event_type=NotificationType(payload["type"]), payload=payload, attempt=1)


def test_a_message_says_what_happened_in_its_subject_and_text() -> None:
    """One-line subject with the task (shortened), the error and the link in the text, and a
    Message-ID that is the same on every try."""
    delivery = due(PAYLOAD)
    message = compose(delivery, sender="Shoal <shoal@example.com>")
    assert message["Subject"] == ("Shoal: Task failed: Write the quarterly report for the "
                                  "board of directors, with…")
    assert message["To"] == "ada@example.com"
    assert message["Message-ID"] == f"<{delivery.id}@shoal>"
    text = message.get_content()
    assert "No worker could run it." in text
    assert "https://shoal.test/tasks/t-1" in text


def test_a_password_over_plain_smtp_is_refused_outside_dev_mode(tmp_path: Path,
                                                                 db: Database) -> None:
    """SHOAL_SMTP_TLS=none with a login is refused when the notifier is built in production."""
    settings = fast(tmp_path, mode="production", smtp_host="mail.example.com", smtp_tls="none",
                    smtp_username="shoal", smtp_password="pw")
    with pytest.raises(ValueError, match="SHOAL_SMTP_TLS=none"):
        Notifier(settings, db)


async def test_a_waiting_checkpoint_reaches_the_mailbox(db: Database, tmp_path: Path) -> None:
    """An email notification arrives with the right envelope, subject and text."""
    async with smtp_server() as (port, mailbox):
        settings = fast(tmp_path, smtp_host="127.0.0.1", smtp_port=port, smtp_tls="none",
                        smtp_from="shoal@shoal.test")
        alice = await add_user(db, "alice")
        task = await add_task(db, alice, "Write the report")
        await set_email(db, alice, "alice@example.com")
        async with running_notifier(settings, db):
            await append(db, event(EventType.CHECKPOINT_READY, task, alice, checkpoint_id="c1",
                                   reason="low_score", message="The draft scored 4/10."))
            ((envelope, message),) = await wait_until(lambda: mailbox.messages, what="a mail")
            await wait_until(_settled(db, "delivered"), what="the delivery recorded")
    (row,) = await deliveries(db)
    assert envelope.mail_from == "shoal@shoal.test"
    assert envelope.rcpt_tos == ["alice@example.com"]
    assert message["Subject"] == "Shoal: A task waits for your decision: Write the report"
    assert message["Message-ID"] == f"<{row.id}@shoal>"
    text = message.get_content()
    assert "The draft scored 4/10." in text
    assert f"https://shoal.test/tasks/{task}" in text
    assert (row.attempts, row.last_status_code) == (1, 250)


async def test_starttls_is_used_and_the_relays_certificate_checked(
        db: Database, tmp_path: Path) -> None:
    """With STARTTLS the relay's certificate must chain to `smtp_ca_file`: it is delivered
    with the right CA, and refused (to be tried again) with the system's."""
    server_tls, ca_file = self_signed(tmp_path)
    async with smtp_server(tls=server_tls) as (port, mailbox):
        trusted = fast(tmp_path, smtp_host="127.0.0.1", smtp_port=port, smtp_tls="starttls",
                       smtp_ca_file=ca_file)
        assert (await EmailSender(trusted).send(due(PAYLOAD))).delivered
        untrusted = fast(tmp_path, smtp_host="127.0.0.1", smtp_port=port, smtp_tls="starttls")
        outcome = await EmailSender(untrusted).send(due(PAYLOAD))
    assert len(mailbox.messages) == 1
    assert (outcome.delivered, outcome.retryable) == (False, True)
    assert "certificate" in (outcome.error or "").lower()


async def test_implicit_tls_delivers(tmp_path: Path) -> None:
    """`smtp_tls=tls` speaks TLS from the first byte (port 465 style)."""
    server_tls, ca_file = self_signed(tmp_path)
    async with smtp_server(tls=server_tls, implicit_tls=True) as (port, mailbox):
        settings = fast(tmp_path, smtp_host="127.0.0.1", smtp_port=port, smtp_tls="tls",
                        smtp_ca_file=ca_file)
        outcome = await EmailSender(settings).send(due(PAYLOAD))
    assert outcome.delivered
    assert len(mailbox.messages) == 1


async def test_a_relay_refusing_the_address_ends_the_delivery(db: Database,
                                                              tmp_path: Path) -> None:
    """A 550 for the recipient fails the delivery on its first try."""
    async with smtp_server() as (port, mailbox):
        mailbox.refuse.add("nobody@example.com")
        settings = fast(tmp_path, smtp_host="127.0.0.1", smtp_port=port, smtp_tls="none")
        alice = await add_user(db, "alice")
        await set_email(db, alice, "nobody@example.com")
        async with running_notifier(settings, db):
            await append(db, completed(await add_task(db, alice), alice))
            (row,) = await wait_until(_settled(db, "failed"), what="the delivery to fail")
    assert (row.attempts, row.last_status_code) == (1, 550)
    assert "No such mailbox" in row.last_error
    assert mailbox.messages == []


def _settled(db: Database, status: str) -> Any:
    async def check() -> Any:
        rows = await deliveries(db)
        return rows if rows and all(r.status == status for r in rows) else None
    return check
