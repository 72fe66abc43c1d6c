"""Real receivers for the notification tests: a webhook endpoint served by uvicorn on
127.0.0.1, and an SMTP server (aiosmtpd) on the test's own event loop."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import ipaddress
import ssl
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from email import message_from_bytes, policy
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import uvicorn
from aiosmtpd.smtp import SMTP, Envelope, Session
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from shoal.api.listen import bind_socket
from tests.runtime.harness import wait_until


@dataclass(frozen=True, slots=True)
class Received:
    """One request a receiver got: its path, headers, raw body and arrival (monotonic)."""

    path: str
    headers: dict[str, str]
    body: bytes
    at: float


@dataclass
class Receiver:
    """A webhook receiver: records every POST; a path answers the statuses queued for it in
    turn (the last one repeats; 200 when none), or hangs until `release` is set if listed in
    `hang`."""

    url: str = ""
    requests: list[Received] = field(default_factory=list)
    answers: dict[str, list[int]] = field(default_factory=dict)
    hang: set[str] = field(default_factory=set)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    open_hangs: int = 0

    def at(self, path: str) -> list[Received]:
        """The requests to `path`, in the order they arrived."""
        return [r for r in self.requests if r.path == path]

    def got(self, path: str, count: int = 1) -> Callable[[], list[Received] | None]:
        """A check for `wait_until`: the requests to `path` once there are `count` of them."""
        def check() -> list[Received] | None:
            found = self.at(path)
            return found if len(found) >= count else None
        return check

    def endpoint(self, path: str) -> str:
        """The full URL of `path`."""
        return f"{self.url}{path}"

    async def _handle(self, request: Request) -> Response:
        path = request.url.path
        self.requests.append(Received(path, dict(request.headers), await request.body(),
                                      time.monotonic()))
        if path in self.hang:
            self.open_hangs += 1
            try:
                await self.release.wait()
            finally:
                self.open_hangs -= 1
            return Response(status_code=200)
        queued = self.answers.get(path, [200])
        status = queued.pop(0) if len(queued) > 1 else queued[0]
        return Response(status_code=status)


@contextlib.asynccontextmanager
async def webhook_receiver() -> AsyncIterator[Receiver]:
    """A `Receiver` listening on 127.0.0.1 until the block exits."""
    receiver = Receiver()
    app = Starlette(routes=[Route("/{path:path}", receiver._handle, methods=["POST"])])
    sock = bind_socket("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", log_config=None,
                                           lifespan="off"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        await wait_until(lambda: server.started or task.done(), what="the receiver to start")
        if task.done():
            task.result()
        host, port = sock.getsockname()[:2]
        receiver.url = f"http://{host}:{port}"
        yield receiver
    finally:
        receiver.release.set()
        server.should_exit = True
        await task
        sock.close()


class Mailbox:
    """What an SMTP server took: each message, parsed, with its envelope; addresses in
    `refuse` are answered 550 at RCPT."""

    def __init__(self) -> None:
        self.messages: list[tuple[Envelope, EmailMessage]] = []
        self.refuse: set[str] = set()

    async def handle_RCPT(self, server: SMTP, session: Session, envelope: Envelope,
                          address: str, rcpt_options: list[str]) -> str:
        """Take the recipient unless told to refuse it."""
        if address in self.refuse:
            return "550 5.1.1 No such mailbox here"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        """Keep the message."""
        raw = envelope.original_content or b""
        parsed = message_from_bytes(raw, policy=policy.default)
        assert isinstance(parsed, EmailMessage)
        self.messages.append((envelope, parsed))
        return "250 Message accepted"


@contextlib.asynccontextmanager
async def smtp_server(*, tls: ssl.SSLContext | None = None,
                      implicit_tls: bool = False) -> AsyncIterator[tuple[int, Mailbox]]:
    """An SMTP server on 127.0.0.1 (STARTTLS offered with `tls`, or TLS from the first byte
    with `implicit_tls`); yields its port and its mailbox."""
    mailbox = Mailbox()
    loop = asyncio.get_running_loop()

    def protocol() -> SMTP:
        return SMTP(mailbox, hostname="localhost", loop=loop,
                    tls_context=None if implicit_tls else tls,
                    require_starttls=tls is not None and not implicit_tls)

    server = await loop.create_server(protocol, "127.0.0.1", 0,
                                      ssl=tls if implicit_tls else None)
    try:
        yield server.sockets[0].getsockname()[1], mailbox
    finally:
        server.close()
        await server.wait_closed()


def self_signed(folder: Path) -> tuple[ssl.SSLContext, Path]:
    """A certificate for 127.0.0.1: the server's TLS context, and the file a client trusts."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_file, key_file = folder / "cert.pem", folder / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_file, key_file)
    return context, cert_file


def header(request: Received, name: str) -> str:
    """A header of a received request (names are case-insensitive)."""
    return request.headers[name.lower()]


def as_json(request: Received) -> Any:
    """A received body, parsed."""
    import json

    return json.loads(request.body)
