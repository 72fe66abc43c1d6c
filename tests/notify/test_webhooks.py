"""Which URLs a webhook may have, what an answer means, and the sender's refusals."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from shoal.notify.delivery import DueDelivery, NotificationType, TargetKind
from shoal.notify.webhooks import WebhookSender, address_problem, outcome_of, url_problem
from tests.notify.harness import fast


@pytest.mark.parametrize(("url", "dev", "allowed"), [
    ("https://hooks.example.com/shoal", False, True),
    ("https://hooks.example.com:8443/a?b=c", False, True),
    ("http://hooks.example.com/shoal", False, False),  # production: HTTPS only
    ("http://hooks.example.com/shoal", True, False),  # dev: plain HTTP to this host only
    ("http://127.0.0.1:9000/hook", True, True),
    ("http://localhost/hook", True, True),
    ("http://127.0.0.1:9000/hook", False, False),
    ("https://127.0.0.1/hook", False, False),  # production: no loopback
    ("https://10.0.0.7/hook", False, False),  # nor private networks
    ("https://[::1]/hook", False, False),
    ("https://169.254.169.254/latest", False, False),  # nor cloud metadata
    ("https://app.localhost/hook", False, False),
    ("https://user:pw@hooks.example.com/", True, False),  # no credentials in the URL
    ("ftp://hooks.example.com/", True, False),
    ("https:///nohost", True, False),
    ("https://hooks.example.com:99999/", True, False),
])
def test_which_urls_may_receive_webhooks(url: str, dev: bool, allowed: bool) -> None:
    """HTTPS to public hosts always; plain HTTP only to loopback in dev mode."""
    assert (url_problem(url, dev=dev, allow_private=False) is None) == allowed


def test_private_addresses_may_be_allowed_by_the_admin() -> None:
    """`webhook_allow_private` lets HTTPS webhooks reach an intranet, never plain HTTP."""
    assert url_problem("https://10.0.0.7/hook", dev=False, allow_private=True) is None
    assert url_problem("http://10.0.0.7/hook", dev=False, allow_private=True) is not None


@pytest.mark.parametrize(("status", "delivered", "retryable"), [
    (200, True, False), (204, True, False), (299, True, False),
    (301, False, True), (408, False, True), (429, False, True),
    (500, False, True), (502, False, True), (503, False, True),
    (400, False, False), (401, False, False), (404, False, False), (410, False, False),
])
def test_what_each_answer_means(status: int, delivered: bool, retryable: bool) -> None:
    """2xx delivers; 408, 429 and anything not 4xx is tried again; other 4xx end it."""
    outcome = outcome_of(status)
    assert (outcome.delivered, outcome.retryable, outcome.status_code) == (
        delivered, retryable, status)


async def test_a_name_resolving_to_loopback_is_not_called() -> None:
    """Before each try outside dev mode the host is resolved; a private answer is refused."""
    problem = await address_problem("localhost", 443)
    assert problem is not None
    assert "not a public address" in problem
    assert await address_problem("93.184.215.14", 443) is None  # a public address, literally


async def test_outside_dev_mode_the_sender_refuses_a_loopback_url(tmp_path: Path) -> None:
    """A webhook registered in dev mode is not called once the server runs in production."""
    delivery = DueDelivery(id=uuid.uuid4(), kind=TargetKind.WEBHOOK,
                           target="http://127.0.0.1:9/hook", secret="x" * 16,
                           event_type=NotificationType.PING, payload={}, attempt=1)
    async with WebhookSender(fast(tmp_path, mode="production")) as sender:
        outcome = await sender.send(delivery)
    assert (outcome.delivered, outcome.retryable) == (False, False)
    assert "https://" in (outcome.error or "")
