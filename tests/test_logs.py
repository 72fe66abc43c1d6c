"""Logging: secrets are masked in every line, and tracebacks never show local variables."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.logs import _SECRET_SHAPES, MASK, redact

JWT = ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJhbGljZSIsInR5cGUiOiJhY2Nlc3MifQ."
       "c2lnbmF0dXJlLWJ5dGVzLWhlcmU")


@pytest.mark.parametrize(("line", "secret"), [
    (f'127.0.0.1:5000 - "WebSocket /ws?token={JWT}" [accepted]', JWT),
    ('GET /ws?since=3&token=opaque-session-value HTTP/1.1', "opaque-session-value"),
    ("worker token shw_Q2hlY2tTZWNyZXRUb2tlbjEyMzQ1Njc4", "shw_Q2hlY2tTZWNyZXRUb2tlbjEyMzQ1Njc4"),
    ("login link shl_bG9naW5saW5rdG9rZW4xMjM0NTY3OA", "shl_bG9naW5saW5rdG9rZW4xMjM0NTY3OA"),
    ("OPENAI_API_KEY=sk-proj-abcdefghijklmnop", "sk-proj-abcdefghijklmnop"),
    ("key sk-ant-api03-abcdefghijklmnop rejected", "sk-ant-api03-abcdefghijklmnop"),
    ("gemini AIzaSyA-1234567890abcdefghijklmnopq", "AIzaSyA-1234567890abcdefghijklmnopq"),
    ("could not connect to postgresql://shoal:hunter2-db@db:5432/shoal", "hunter2-db"),
    ("redis://:cache-pass@cache:6379/0 unreachable", "cache-pass"),
    ("Authorization: Bearer opaque0123456789", "opaque0123456789"),
    ("password=letmein123 in a query", "letmein123"),
])
def test_redact_masks_every_secret_shape(line: str, secret: str) -> None:
    """Each kind of secret Shoal handles is masked wherever it stands in a line."""
    masked = redact(line)
    assert secret not in masked
    assert MASK in masked


def test_redact_leaves_ordinary_fields_alone() -> None:
    """Token counts, subtask keys and plain URLs are not secrets."""
    line = "subtask.done key=planner input_tokens=512 url=http://127.0.0.1:8000/api/v1/tasks"
    assert redact(line) == line


def _every_shape(text: str) -> str:
    """`redact` without its shortcut: every shape's pattern run on the line, in order."""
    for pattern, replacement, _, _ in _SECRET_SHAPES:
        text = pattern.sub(replacement, text)
    return text


# Pieces of lines: the secrets' own shapes, the pieces `redact` looks for before a pattern, and
# the text around them, so that generated lines hold secrets, near-secrets and neither.
_PIECES = [JWT, "eyJ", "eyJabcd.eyJefgh.", "shw_", "shl_", "shs_", "sh", "Q2hlY2tTZWNyZXQ",
           "sk-", "sk-proj-abcdefghijklmnop", "AIza", "AIzaSyA-1234567890abcdefghijklmnopq",
           "://", "postgresql://shoal:hunter2@db", "@", ":", "=", "?", "&", "token", "TOKEN",
           "password", "api_key", "Bearer ", "basic ", "BASIC  ", "abcdefgh12345678", " ", "-",
           "_", "/", "worker.attempt_finished", "attempt_id=", "[info     ] ",
           # the case-insensitive words, in other cases and spellings, and characters that
           # match an ASCII letter under `(?i)` without lowercasing to it (the long s, U+017F;
           # the Kelvin sign, U+212A)
           "Token=", "ACCESS_TOKEN=", "refresh_token", "apikey", "Api_Key=", "SECRET",
           "Secret_Key", "PassWord=", "bEaReR\t", "Basic\n", "bearer", "ba\u017fic ",
           "api_\u212aey=", "to\u212aen=", ",", ";", "\t", "\u00e9"]


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=12).map("".join))
def test_a_shape_skipped_for_want_of_its_pieces_could_not_have_matched(line: str) -> None:
    """`redact` runs a shape's pattern only where the line holds a piece the pattern needs:
    the line comes out as if every pattern had run."""
    assert redact(line) == _every_shape(line)


def _run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stderr


def test_tracebacks_are_logged_without_local_variables() -> None:
    """An exception logged by structlog shows its traceback but none of the frames' locals,
    and a secret in the message or a secret-named field is masked."""
    err = _run("""
        import structlog
        from shoal.logs import configure_logging
        configure_logging("info")
        log = structlog.get_logger("t")

        def sign_in(username):
            password = "plain-text-password-42"
            signing_key = "jwt-signing-key-value-43"
            raise RuntimeError("cannot reach postgresql://u:db-pass-44@h/x")

        try:
            sign_in("alice")
        except RuntimeError:
            log.exception("api.unexpected_error", worker_token="shw_secretsecretsecret45")
    """)
    assert "Traceback" in err
    assert "sign_in" in err
    for secret in ("plain-text-password-42", "jwt-signing-key-value-43", "db-pass-44",
                   "secretsecretsecret45"):
        assert secret not in err, err


def test_standard_library_lines_are_redacted() -> None:
    """uvicorn's lines (standard-library logging) pass through the same redaction."""
    err = _run(f"""
        import logging
        from shoal.logs import configure_logging
        configure_logging("info", access_log=True)
        logging.getLogger("uvicorn.error").info('%s - "WebSocket %s" [accepted]',
                                                "127.0.0.1:1", "/ws?token={JWT}")
        logging.getLogger("uvicorn.access").info('%s - "%s %s HTTP/%s" %d', "127.0.0.1:1",
                                                 "GET", "/ws?token={JWT}", "1.1", 101)
    """)
    assert err.count("/ws?token=" + MASK) == 2, err
    assert JWT not in err
