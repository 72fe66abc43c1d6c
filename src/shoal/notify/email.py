"""Email: a notification as a plain-text message, sent through the SMTP relay in Settings.

`smtp_tls` picks how the connection is protected: `starttls` (upgrade after connecting, port
587), `tls` (TLS from the first byte, port 465) or `none` (dev mode only when a password is
sent). A 5xx reply ends the delivery (the relay refuses it for good), except a refused login
(the server's settings, which an admin can fix); a 4xx reply, a timeout or a lost connection
is tried again.
"""

from __future__ import annotations

import asyncio
from email.message import EmailMessage
from email.utils import formatdate
from typing import Any

import aiosmtplib

from shoal.config import Settings
from shoal.notify.delivery import DueDelivery, NotificationType, Outcome

_SUBJECTS = {
    NotificationType.TASK_COMPLETED: "Task completed",
    NotificationType.TASK_FAILED: "Task failed",
    NotificationType.TASK_BUDGET_EXCEEDED: "Task stopped: out of budget",
    NotificationType.CHECKPOINT_WAITING: "A task waits for your decision",
    NotificationType.PING: "A test notification",
}
_SAID = {
    NotificationType.TASK_COMPLETED: "has completed.",
    NotificationType.TASK_FAILED: "has failed.",
    NotificationType.TASK_BUDGET_EXCEEDED: "was stopped: it used up its budget.",
    NotificationType.CHECKPOINT_WAITING: "is paused at a checkpoint until you decide.",
}
SUBJECT_TASK = 60  # characters of the task's description in the subject
SENT = 250  # the relay's reply to a message it took


def smtp_problem(settings: Settings) -> str | None:
    """Why these SMTP settings may not be used, or None."""
    if settings.smtp_tls == "none" and settings.smtp_username and settings.mode != "dev":
        return ("SHOAL_SMTP_TLS=none would send the SMTP password unencrypted. Use starttls or "
                "tls, or run in dev mode with SHOAL_MODE=dev.")
    return None


def compose(delivery: DueDelivery, *, sender: str) -> EmailMessage:
    """The message of one delivery."""
    payload = delivery.payload
    task: dict[str, Any] = payload.get("task") or {}
    message = EmailMessage()
    message["From"] = sender
    message["To"] = delivery.target
    message["Subject"] = _subject(delivery.event_type, task)
    message["Date"] = formatdate(usegmt=True)
    message["Message-ID"] = f"<{delivery.id}@shoal>"  # the same on every try: deduplicated
    message["Auto-Submitted"] = "auto-generated"
    message["Shoal-Event"] = delivery.event_type.value
    message.set_content(_text(delivery.event_type, payload, task))
    return message


def _subject(kind: NotificationType, task: dict[str, Any]) -> str:
    about = " ".join(str(task.get("description", "")).split())
    if len(about) > SUBJECT_TASK:
        about = about[:SUBJECT_TASK - 1] + "…"
    return f"Shoal: {_SUBJECTS[kind]}" + (f": {about}" if about else "")


def _text(kind: NotificationType, payload: dict[str, Any], task: dict[str, Any]) -> str:
    if kind is NotificationType.PING:
        return f"{payload.get('message', '')}\n\nNotification {payload['id']}.\n"
    lines = [f"Your task \"{task.get('description', '')}\" {_SAID[kind]}", ""]
    if task.get("error"):
        lines += [f"Error: {task['error']}", ""]
    checkpoint = payload.get("checkpoint") or {}
    for key in ("reason", "message", "question", "deadline_at"):
        if checkpoint.get(key):
            lines.append(f"{key.replace('_', ' ').capitalize()}: {checkpoint[key]}")
    if checkpoint:
        lines.append("")
    lines += [f"Open it: {task.get('url', '')}", "",
              f"Task {task.get('id', '')}, status {task.get('status', '')}.",
              f"Notification {payload['id']} ({kind.value}), {payload.get('created_at', '')}."]
    return "\n".join(lines) + "\n"


class EmailSender:
    """Sends deliveries by email through the relay of `settings` (one connection each)."""

    def __init__(self, settings: Settings) -> None:
        problem = smtp_problem(settings)
        if problem is not None:
            raise ValueError(problem)
        self._settings = settings

    async def send(self, delivery: DueDelivery) -> Outcome:
        """Send one message; the relay's refusal, a timeout or an error is the `Outcome`."""
        s = self._settings
        if not s.smtp_host:
            return Outcome.give_up("This server sends no email (SHOAL_SMTP_HOST is not set).")
        message = compose(delivery, sender=s.smtp_from)
        try:
            async with asyncio.timeout(s.smtp_timeout):
                await aiosmtplib.send(
                    message, hostname=s.smtp_host, port=s.smtp_port,
                    username=s.smtp_username, password=s.smtp_password.get_secret_value()
                    if s.smtp_password else None, use_tls=s.smtp_tls == "tls",
                    start_tls=s.smtp_tls == "starttls", timeout=s.smtp_timeout,
                    cert_bundle=str(s.smtp_ca_file) if s.smtp_ca_file else None)
        except TimeoutError:
            return Outcome.retry(f"The mail relay did not finish within {s.smtp_timeout:g} s.")
        except aiosmtplib.SMTPRecipientsRefused as exc:
            return _refused(min(r.code for r in exc.recipients), "; ".join(
                f"{r.code} {r.message}" for r in exc.recipients))
        except aiosmtplib.SMTPAuthenticationError as exc:
            return Outcome.retry(f"The mail relay refused the login: {exc.code} {exc.message}",
                                 exc.code)
        except aiosmtplib.SMTPResponseException as exc:
            return _refused(exc.code, f"{exc.code} {exc.message}")
        except (aiosmtplib.SMTPException, OSError) as exc:
            return Outcome.retry(f"{type(exc).__name__}: {exc}".rstrip(": "))
        return Outcome.ok(SENT)


def _refused(code: int, error: str) -> Outcome:
    """A relay's refusal: for good (5xx) or for now."""
    if 500 <= code < 600:
        return Outcome.give_up(f"The mail relay refused the message: {error}", code)
    return Outcome.retry(f"The mail relay deferred the message: {error}", code)

