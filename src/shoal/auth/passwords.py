"""Password hashing with bcrypt.

bcrypt reads at most 72 bytes of a password and would silently ignore the rest, so longer
passwords are refused instead of being half-checked. Hashing is slow on purpose; the async
wrappers run it in a thread so the event loop keeps serving.
"""

from __future__ import annotations

import asyncio

import bcrypt

from shoal.errors import InvalidInput

MIN_PASSWORD_CHARS = 8
"""Shortest password accepted, in characters."""

MAX_PASSWORD_BYTES = 72
"""Longest password accepted, in UTF-8 bytes: bcrypt's own limit."""


def check_password_strength(password: str) -> None:
    """Raise `InvalidInput` unless `password` is between 8 characters and 72 UTF-8 bytes."""
    if len(password) < MIN_PASSWORD_CHARS:
        raise InvalidInput(
            f"The password is too short: use at least {MIN_PASSWORD_CHARS} characters."
        )
    if len(password.encode()) > MAX_PASSWORD_BYTES:
        raise InvalidInput(
            f"The password is too long: bcrypt uses at most {MAX_PASSWORD_BYTES} bytes "
            "(UTF-8), and would ignore the rest. Use a shorter password."
        )


def hash_password(password: str, *, rounds: int) -> str:
    """The bcrypt hash of `password` with `2**rounds` work; refuses weak or overlong input."""
    check_password_strength(password)
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds)).decode("ascii")


def verify_password(password: str, password_hash: str) -> bool:
    """Whether `password` matches `password_hash`; false for a malformed hash."""
    secret = password.encode()
    if len(secret) > MAX_PASSWORD_BYTES:
        return False  # no stored hash can be of such a password
    try:
        return bcrypt.checkpw(secret, password_hash.encode("ascii"))
    except ValueError:
        return False


async def hash_password_async(password: str, *, rounds: int) -> str:
    """`hash_password` in a worker thread."""
    return await asyncio.to_thread(hash_password, password, rounds=rounds)


async def verify_password_async(password: str, password_hash: str) -> bool:
    """`verify_password` in a worker thread."""
    return await asyncio.to_thread(verify_password, password, password_hash)
