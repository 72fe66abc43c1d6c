"""Tests for shoal.engine.retry."""

from __future__ import annotations

import pytest

from shoal.engine.retry import RetryPolicy
from shoal.errors import InvalidInput


def test_should_retry_until_max_attempts() -> None:
    """Retries are allowed while fewer than max_attempts have been made."""
    policy = RetryPolicy(max_attempts=3)
    assert [policy.should_retry(n) for n in (0, 1, 2, 3, 4)] == [True, True, True, False, False]


def test_delay_without_jitter_follows_the_table() -> None:
    """rand = 0.5 means no jitter; the last delay repeats."""
    policy = RetryPolicy()
    assert [policy.delay(n, rand=0.5) for n in (1, 2, 3, 4, 10)] == [10.0, 30.0, 60.0, 60.0, 60.0]


def test_delay_jitter_bounds() -> None:
    """Jitter spreads the delay by at most the given fraction either way."""
    policy = RetryPolicy(jitter=0.1)
    assert policy.delay(1, rand=0.0) == pytest.approx(9.0)
    assert policy.delay(1, rand=0.999999) == pytest.approx(11.0, abs=1e-4)


def test_delay_is_never_negative() -> None:
    """Even full jitter at the lowest rand gives zero, not less."""
    policy = RetryPolicy(delays=(5.0,), jitter=1.0)
    assert policy.delay(1, rand=0.0) == 0.0


def test_delay_before_first_failure_uses_first_entry() -> None:
    """attempts_made of zero is treated as one."""
    assert RetryPolicy().delay(0, rand=0.5) == 10.0


def test_no_delays_means_immediate_retry() -> None:
    """An empty delay table retries at once."""
    assert RetryPolicy(delays=()).delay(2, rand=0.3) == 0.0


@pytest.mark.parametrize(
    "kwargs",
    [{"max_attempts": 0}, {"delays": (1.0, -1.0)}, {"jitter": 1.5}, {"jitter": -0.1}],
)
def test_invalid_policy_is_refused(kwargs: dict[str, object]) -> None:
    """Nonsense settings raise InvalidInput at construction."""
    with pytest.raises(InvalidInput):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]
