"""When a delivery is tried again, and when it ends."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import get_args

from shoal.api.routes.notifications import Subscribable
from shoal.notify.delivery import (
    SUBSCRIBABLE,
    DeliveryStatus,
    Outcome,
    retry_policy,
    settle,
)
from tests.conftest import make_settings

NOW = datetime(2026, 11, 28, 10, 0, tzinfo=UTC)


def test_by_default_five_tries_spread_over_about_an_hour(tmp_path: Path) -> None:
    """The default backoff waits 90 s, then three times longer each time: 1 h in all."""
    policy = retry_policy(make_settings(tmp_path))
    waits = [policy.delay(n, rand=0.5) for n in range(1, 5)]
    assert waits == [90.0, 270.0, 810.0, 2430.0]
    assert policy.should_retry(4)
    assert not policy.should_retry(5)
    assert 50 * 60 < sum(waits) < 70 * 60


def test_jitter_spreads_each_wait_both_ways(tmp_path: Path) -> None:
    """With 20 % jitter a wait lies within ±20 % of its nominal value, by the random number."""
    policy = retry_policy(make_settings(tmp_path))
    assert policy.delay(1, rand=0.0) == 72.0
    assert 107.9 < policy.delay(1, rand=0.9999) <= 108.0


def test_a_retryable_failure_waits_and_stays_pending(tmp_path: Path) -> None:
    """A 5xx before the last try leaves the delivery pending until the backoff has passed."""
    policy = retry_policy(make_settings(tmp_path))
    settled = settle(Outcome.retry("HTTP 500", 500), attempt=2, policy=policy, now=NOW,
                     rand=0.5)
    assert settled.status is DeliveryStatus.PENDING
    assert settled.next_attempt_at == NOW + timedelta(seconds=270)


def test_the_last_try_fails_for_good(tmp_path: Path) -> None:
    """After the last try even a retryable failure ends the delivery as failed."""
    policy = retry_policy(make_settings(tmp_path))
    settled = settle(Outcome.retry("HTTP 503", 503), attempt=5, policy=policy, now=NOW,
                     rand=0.5)
    assert settled.status is DeliveryStatus.FAILED


def test_a_final_refusal_fails_at_once(tmp_path: Path) -> None:
    """A failure no retry can mend (a 404) ends the delivery on the first try."""
    settled = settle(Outcome.give_up("HTTP 404", 404), attempt=1,
                     policy=retry_policy(make_settings(tmp_path)), now=NOW, rand=0.5)
    assert settled.status is DeliveryStatus.FAILED


def test_success_is_delivered_with_its_time(tmp_path: Path) -> None:
    """A 2xx delivers, stamped with the time of the try."""
    settled = settle(Outcome.ok(204), attempt=3, policy=retry_policy(make_settings(tmp_path)),
                     now=NOW, rand=0.5)
    assert (settled.status, settled.delivered_at) == (DeliveryStatus.DELIVERED, NOW)


def test_the_api_offers_exactly_the_subscribable_types() -> None:
    """The request schemas' list of types is the enum's, without `ping`."""
    assert list(get_args(Subscribable)) == [t.value for t in SUBSCRIBABLE]
