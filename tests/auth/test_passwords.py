"""bcrypt password hashing: round trips, limits, and refusing what bcrypt would truncate."""

from __future__ import annotations

import pytest

from shoal.auth.passwords import (
    hash_password,
    hash_password_async,
    verify_password,
    verify_password_async,
)
from shoal.errors import InvalidInput

ROUNDS = 4  # bcrypt's minimum keeps the tests fast


def test_hash_verifies_the_same_password() -> None:
    """A hash verifies the password it was made from."""
    assert verify_password("correct horse", hash_password("correct horse", rounds=ROUNDS))


def test_hash_rejects_another_password() -> None:
    """A hash does not verify a different password."""
    assert not verify_password("wrong horse", hash_password("correct horse", rounds=ROUNDS))


def test_hash_uses_the_requested_cost_and_a_fresh_salt() -> None:
    """The cost is encoded in the hash, and the same password hashes differently each time."""
    first = hash_password("correct horse", rounds=ROUNDS)
    second = hash_password("correct horse", rounds=ROUNDS)
    assert first.startswith("$2b$04$")
    assert first != second


def test_short_password_is_refused() -> None:
    """Fewer than 8 characters is refused with a message saying the minimum."""
    with pytest.raises(InvalidInput, match="at least 8"):
        hash_password("1234567", rounds=ROUNDS)


def test_eight_characters_are_enough() -> None:
    """Exactly 8 characters is accepted."""
    assert verify_password("12345678", hash_password("12345678", rounds=ROUNDS))


def test_password_over_72_bytes_is_refused() -> None:
    """More than 72 bytes is refused rather than silently truncated."""
    with pytest.raises(InvalidInput, match="72 bytes"):
        hash_password("x" * 73, rounds=ROUNDS)


def test_limit_counts_utf8_bytes_not_characters() -> None:
    """37 two-byte characters (74 bytes) are refused; 36 (72 bytes) are accepted."""
    with pytest.raises(InvalidInput, match="72 bytes"):
        hash_password("é" * 37, rounds=ROUNDS)
    assert verify_password("é" * 36, hash_password("é" * 36, rounds=ROUNDS))


def test_overlong_password_never_verifies() -> None:
    """A password bcrypt would truncate does not match a hash of its first 72 bytes."""
    stored = hash_password("x" * 72, rounds=ROUNDS)
    assert not verify_password("x" * 73, stored)


@pytest.mark.parametrize("stored", ["", "not a hash", "$2b$04$short", "ünïcode"])
def test_malformed_hash_does_not_verify(stored: str) -> None:
    """A corrupt stored hash gives `False`, not an exception."""
    assert not verify_password("correct horse", stored)


async def test_async_wrappers_round_trip() -> None:
    """The async wrappers hash and verify like the sync functions."""
    stored = await hash_password_async("correct horse", rounds=ROUNDS)
    assert await verify_password_async("correct horse", stored)
    assert not await verify_password_async("wrong horse", stored)


async def test_async_hash_refuses_short_password() -> None:
    """The async wrapper raises the same `InvalidInput`."""
    with pytest.raises(InvalidInput):
        await hash_password_async("short", rounds=ROUNDS)
