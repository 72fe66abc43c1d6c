"""How a worker reaches the control plane: the endpoint URL, reconnect backoff, and a quiet
logger for the connection."""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from websockets.asyncio.client import ClientConnection
from websockets.frames import Frame, Opcode
from websockets.protocol import OPEN, Event

from shoal.errors import InvalidInput


def websocket_url(server_url: str) -> str:
    """The worker endpoint of the control plane at `server_url` (http(s):// or ws(s)://)."""
    parts = urlsplit(server_url)
    scheme = {"http": "ws", "https": "wss", "ws": "ws", "wss": "wss"}.get(parts.scheme)
    if scheme is None or not parts.netloc:
        raise InvalidInput(
            f"Server URL {server_url!r} is not an http(s) address. Pass the control plane's "
            "URL, e.g. --server http://127.0.0.1:8000"
        )
    path = parts.path.rstrip("/")
    if not path.endswith("/ws/worker"):
        path += "/ws/worker"
    return urlunsplit((scheme, parts.netloc, path, "", ""))


@dataclass(slots=True)
class Backoff:
    """Exponential backoff with full jitter: wait n is uniform in [0, min(cap, base * 2**n)]."""

    base: float = 0.5
    cap: float = 30.0
    failures: int = 0

    def next_delay(self) -> float:
        """How long to wait before the next try; each call counts one more failure."""
        ceiling = min(self.cap, self.base * 2 ** min(self.failures, 32))
        self.failures += 1
        return random.uniform(0, ceiling)

    def reset(self) -> None:
        """Start over after a success."""
        self.failures = 0


def quiet_websocket_logger() -> logging.Logger:
    """A logger for websockets that never logs at DEBUG, where it would print the token."""
    logger = logging.getLogger("shoal.worker.websocket")
    logger.setLevel(logging.INFO)
    return logger


def send_now(conn: ClientConnection, text: str) -> bool:
    """Write `text` as a text frame to `conn`'s socket right here, through the connection's
    own protocol (its framing, mask and extensions), when nothing could make `conn.send` wait
    or refuse: the connection open, no fragmented message on its way, the transport neither
    paused nor closing. False, having written nothing, when any of that does not hold: then
    `conn.send` is the way, with its waits and its errors. A step's result leaves without
    `send`'s context manager and its turn of the event loop (`benchmarks/README.md`, issue 37).
    """
    protocol = conn.protocol
    if (protocol.state is not OPEN or protocol.expect_continuation_frame or conn.paused
            or conn.send_in_progress is not None or conn.transport.is_closing()):
        return False
    protocol.send_text(text.encode())
    conn.send_data()
    return True


class WorkerConnection(ClientConnection):
    """A worker's connection to the control plane that hands a whole text message to `take`
    as it arrives, in the connection's own `data_received`, while the reader waits for the
    next message and none is queued: no turn of the event loop for the reader, whose wait
    goes on (issue 37's twenty-first round). `take(text)` returns False for a message it
    leaves to the reader, which then reads it as any other; so does every message while the
    reader is busy or one is queued before it, so that none overtakes another."""

    take: Callable[[str], bool] | None = None

    def process_event(self, event: Event) -> None:
        take = self.take
        if (take is not None and type(event) is Frame and event.opcode is Opcode.TEXT
                and event.fin and self.response is not None):
            waiting = self.recv_messages
            if waiting.get_in_progress and not waiting.frames.queue:
                try:
                    text = str(event.data, "utf-8")
                except UnicodeDecodeError:  # the reader's `recv` raises it, as before
                    pass
                else:
                    if take(text):
                        return
        super().process_event(event)
