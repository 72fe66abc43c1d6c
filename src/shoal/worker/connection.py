"""How a worker reaches the control plane: the endpoint URL, reconnect backoff, and a quiet
logger for the connection."""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

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
