"""A receiver can check a delivery's signature with nothing but the documented scheme."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from shoal.errors import Unauthorized
from shoal.notify.signing import TOLERANCE, signature_header, verify_signature

SECRET = "whsec-0123456789abcdef"
BODY = '{"id":"d1","type":"task.completed","task":{"description":"Café ☕"}}'.encode()
NOW = 1_800_000_000


def test_the_header_is_the_hmac_of_timestamp_dot_body_computed_by_hand() -> None:
    """`t=<ts>,v1=<hex HMAC-SHA256(secret, "<ts>." + body)>`, exactly as documented."""
    header = signature_header(SECRET, BODY, NOW)
    mac = hmac.new(SECRET.encode(), f"{NOW}.".encode() + BODY, hashlib.sha256).hexdigest()
    assert header == f"t={NOW},v1={mac}"


def test_a_fresh_untouched_request_verifies() -> None:
    """The signed body, checked a minute later, verifies and gives back its timestamp."""
    header = signature_header(SECRET, BODY, NOW)
    assert verify_signature(SECRET, BODY, header, now=NOW + 60) == NOW


@pytest.mark.parametrize(("body", "secret"), [
    (BODY.replace(b"completed", b"failed"), SECRET),  # the body was changed
    (BODY, SECRET + "x"),  # signed with another secret
])
def test_a_changed_body_or_another_secret_is_refused(body: bytes, secret: str) -> None:
    """Any other body, or any other secret, fails the check."""
    header = signature_header(SECRET, BODY, NOW)
    with pytest.raises(Unauthorized) as caught:
        verify_signature(secret, body, header, now=NOW)
    assert caught.value.code == "bad_signature"


def test_an_old_request_replayed_later_is_refused() -> None:
    """A signature older than the tolerance is refused even though it matches."""
    header = signature_header(SECRET, BODY, NOW)
    with pytest.raises(Unauthorized) as caught:
        verify_signature(SECRET, BODY, header, now=NOW + TOLERANCE + 1)
    assert caught.value.code == "stale_signature"


def test_a_replay_with_a_new_timestamp_does_not_match() -> None:
    """Moving `t` forward to get past the replay check breaks the signature (`t` is signed)."""
    header = signature_header(SECRET, BODY, NOW)
    forged = header.replace(f"t={NOW}", f"t={NOW + 3600}")
    with pytest.raises(Unauthorized):
        verify_signature(SECRET, BODY, forged, now=NOW + 3600)


@pytest.mark.parametrize("header", ["", "v1=abc", f"t={NOW}", "t=soon,v1=abc",
                                    f"t={NOW},v1=é"])
def test_a_malformed_header_is_refused(header: str) -> None:
    """A header without a numeric `t` and a `v1` (or with a non-ASCII one) never verifies."""
    with pytest.raises(Unauthorized):
        verify_signature(SECRET, BODY, header, now=NOW)


def test_any_of_several_v1_values_may_match() -> None:
    """A header with more than one `v1` verifies when one of them matches."""
    good = signature_header(SECRET, BODY, NOW).split(",")[1]
    assert verify_signature(SECRET, BODY, f"t={NOW},v1={'0' * 64},{good}", now=NOW) == NOW
