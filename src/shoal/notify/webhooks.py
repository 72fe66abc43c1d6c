"""Webhooks: which URLs may receive notifications, and the sender that POSTs them signed.

Outside dev mode a webhook must use HTTPS and reach a public address (checked when it is
registered and again, after resolving its host, before every try), unless
`webhook_allow_private` says this server may call into private networks. A try is one request,
bounded in all by `webhook_timeout`; redirects are not followed. 2xx delivers; 408, 429, other
answers than 4xx, timeouts and network errors are tried again; other 4xx answers end it.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import socket
import time
from collections.abc import Callable
from types import TracebackType
from urllib.parse import urlsplit

import httpx

from shoal import __version__
from shoal.config import Settings
from shoal.notify.delivery import DueDelivery, Outcome
from shoal.notify.signing import (
    ATTEMPT_HEADER,
    EVENT_HEADER,
    ID_HEADER,
    SIGNATURE_HEADER,
    signature_header,
)

LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})
RETRIED_4XX = frozenset({408, 429})


def url_problem(url: str, *, dev: bool, allow_private: bool) -> str | None:
    """Why `url` cannot be a webhook on this server, or None if it can."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  # raises ValueError for a port out of range
    except ValueError:
        return "is not a valid URL"
    host = parts.hostname
    if parts.scheme not in ("https", "http") or not host:
        return "must be an https:// URL"
    if parts.username is not None or parts.password is not None:
        return "must not hold a user name or password (the signature proves who calls)"
    if parts.scheme == "http" and not (dev and host in LOOPBACK_NAMES):
        return ("must use https:// (a server in dev mode also takes http://127.0.0.1 and "
                "http://localhost)")
    if not dev and not allow_private and _private_name(host):
        return "points at a private or loopback address; this server calls public ones only"
    return None


def _private_name(host: str) -> bool:
    """Whether `host` is, by its name alone, a loopback, private or reserved address."""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return not ipaddress.ip_address(host).is_global
    except ValueError:
        return False  # a name: what it resolves to is checked before each try


async def address_problem(host: str, port: int) -> str | None:
    """Why `host` may not be called (it resolves to a non-public address), or None."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    for info in infos:
        address = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
        if not address.is_global:
            return (f"{host} resolves to {address}, which is not a public address; this "
                    "server calls public ones only (SHOAL_WEBHOOK_ALLOW_PRIVATE allows more)")
    return None


def outcome_of(status_code: int) -> Outcome:
    """What an HTTP answer means for the delivery."""
    if 200 <= status_code < 300:
        return Outcome.ok(status_code)
    error = f"HTTP {status_code} {httpx.codes.get_reason_phrase(status_code)}".rstrip()
    if 400 <= status_code < 500 and status_code not in RETRIED_4XX:
        return Outcome.give_up(error, status_code)
    return Outcome.retry(error, status_code)


def encode_body(payload: object) -> bytes:
    """The exact bytes sent (and signed): compact UTF-8 JSON."""
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


class WebhookSender:
    """POSTs deliveries to webhooks over one pooled HTTP client (close it with `aclose`)."""

    def __init__(self, settings: Settings, *, clock: Callable[[], float] = time.time) -> None:
        self._settings = settings
        self._clock = clock
        self._timeout = settings.webhook_timeout
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(settings.webhook_timeout), follow_redirects=False,
            headers={"User-Agent": f"Shoal-Webhooks/{__version__}"},
            limits=httpx.Limits(max_connections=settings.notify_concurrency,
                                max_keepalive_connections=settings.notify_concurrency))

    async def __aenter__(self) -> WebhookSender:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the pooled connections."""
        await self._client.aclose()

    async def send(self, delivery: DueDelivery) -> Outcome:
        """POST one delivery, signed; a refused URL, a timeout or an error is the `Outcome`."""
        refused = await self._refusal(delivery.target)
        if refused is not None:
            return refused
        body = encode_body(delivery.payload)
        headers = {"Content-Type": "application/json", ID_HEADER: str(delivery.id),
                   EVENT_HEADER: delivery.event_type.value,
                   ATTEMPT_HEADER: str(delivery.attempt),
                   SIGNATURE_HEADER: signature_header(delivery.secret or "", body,
                                                      int(self._clock()))}
        try:
            async with asyncio.timeout(self._timeout):
                request = self._client.build_request("POST", delivery.target, content=body,
                                                     headers=headers)
                response = await self._client.send(request, stream=True)
                await response.aclose()  # the status is all that counts; the body is not read
        except TimeoutError:
            return Outcome.retry(f"No answer within {self._timeout:g} s.")
        except httpx.HTTPError as exc:
            return Outcome.retry(f"{type(exc).__name__}: {exc}".rstrip(": "))
        return outcome_of(response.status_code)

    async def _refusal(self, url: str) -> Outcome | None:
        """The outcome of a URL this server may not call now (its mode or its address)."""
        dev = self._settings.mode == "dev"
        allow = self._settings.webhook_allow_private
        problem = url_problem(url, dev=dev, allow_private=allow)
        if problem is None and not dev and not allow:
            parts = urlsplit(url)
            try:
                problem = await address_problem(str(parts.hostname),
                                                parts.port or (443 if parts.scheme == "https"
                                                               else 80))
            except OSError as exc:
                return Outcome.retry(f"Cannot resolve {parts.hostname}: {exc}")
        return None if problem is None else Outcome.give_up(f"The URL {problem}.")
