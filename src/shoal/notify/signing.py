"""How a webhook's receiver knows a request came from Shoal, unchanged and recently.

Every delivery is a `POST` of a JSON body (UTF-8) with these headers:

- `Shoal-Signature: t=<timestamp>,v1=<signature>`, where `<timestamp>` is the time of this try
  in whole seconds since the Unix epoch (decimal ASCII digits) and `<signature>` is the
  lowercase hex HMAC-SHA256, keyed with the webhook's secret (its UTF-8 bytes), of the bytes
  `<timestamp>` + `.` + the raw request body exactly as received (before any JSON parsing);
- `Shoal-Webhook-Id: <delivery id>`: the same on every try of one notification (and equal to
  the body's `id`), so a receiver that has handled it already can answer 2xx and do nothing;
- `Shoal-Event: <type>` (the body's `type`) and `Shoal-Attempt: <n>` (1 for the first try).

A receiver checks: the header parses; `|now - timestamp|` is at most five minutes (an old
request replayed later is refused); the signature it computes equals one of the `v1` values
(compared in constant time). `verify_signature` below does exactly that, and is all a Python
receiver needs. This is Stripe's scheme under Shoal's names.
"""

from __future__ import annotations

import hashlib
import hmac

from shoal.errors import Unauthorized

SIGNATURE_HEADER = "Shoal-Signature"
ID_HEADER = "Shoal-Webhook-Id"
EVENT_HEADER = "Shoal-Event"
ATTEMPT_HEADER = "Shoal-Attempt"
TOLERANCE = 300.0  # seconds a signed request stays acceptable


def signature(secret: str, body: bytes, timestamp: int) -> str:
    """The hex HMAC-SHA256 of `<timestamp>.<body>` keyed with `secret`."""
    signed = str(timestamp).encode("ascii") + b"." + body
    return hmac.new(secret.encode("utf-8"), signed, hashlib.sha256).hexdigest()


def signature_header(secret: str, body: bytes, timestamp: int) -> str:
    """The value of `Shoal-Signature` for `body` sent at `timestamp`."""
    return f"t={timestamp},v1={signature(secret, body, timestamp)}"


def verify_signature(secret: str, body: bytes, header: str, *, now: float,
                     tolerance: float = TOLERANCE) -> int:
    """Check a `Shoal-Signature` header against the raw `body`; its timestamp if it holds,
    else `Unauthorized` saying what is wrong."""
    timestamp: int | None = None
    candidates: list[str] = []
    for part in header.split(","):
        key, _, value = part.strip().partition("=")
        if key == "t" and value.isascii() and value.isdigit():
            timestamp = int(value)
        elif key == "v1":
            candidates.append(value)
    if timestamp is None or not candidates:
        raise Unauthorized(f"{SIGNATURE_HEADER} must read t=<timestamp>,v1=<signature>.",
                           code="bad_signature")
    if abs(now - timestamp) > tolerance:
        raise Unauthorized("The signature's timestamp is too far from now: a replay, or a "
                           "clock that is off.", code="stale_signature")
    expected = signature(secret, body, timestamp)
    if not any(c.isascii() and hmac.compare_digest(expected, c) for c in candidates):
        raise Unauthorized("The signature does not match the body and the secret.",
                           code="bad_signature")
    return timestamp
