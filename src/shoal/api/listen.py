"""The listening socket of a control plane, in a module of its own: `shoal up` and `shoal
serve` bind their port before importing (or starting) anything else, so a port that is taken
is said at once."""

from __future__ import annotations

import socket


def bind_socket(host: str = "127.0.0.1", port: int = 0) -> socket.socket:
    """A listening TCP socket (port 0: any free port).

    Created with `IPPROTO_TCP` named, not 0: asyncio turns Nagle's algorithm off
    (`TCP_NODELAY`) only on sockets whose protocol says TCP, and accepted connections inherit
    it. With Nagle on, a burst of small WebSocket messages to one worker (say, a layer of
    `execute_task`) waited for the worker's delayed ACK: about 40 ms (ADR 0010). A host with
    a colon is an IPv6 address.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(512)
    return sock
