"""A proxy that lets nothing through and remembers who tried.

Point `HTTPS_PROXY`/`HTTP_PROXY` at it (with `NO_PROXY=127.0.0.1,localhost`) while AI tools run
against the fake model server: every attempt to reach another host — `CONNECT host:443` for
HTTPS, an absolute-URI request for plain HTTP — is recorded and refused with 403. Tests then
assert that the list is empty.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

_REFUSAL = (b"HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nContent-Length: 44\r\n"
            b"Connection: close\r\n\r\nShoal test sentinel: no outside connections.")


@dataclass
class Sentinel:
    """The attempts seen so far, as "METHOD target" lines."""

    url: str = ""
    attempts: list[str] = field(default_factory=list)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(10):
                line = await reader.readline()
                while (header := await reader.readline()) not in (b"\r\n", b"\n", b""):
                    del header
            parts = line.decode("latin-1").split()
            if len(parts) >= 2:
                self.attempts.append(f"{parts[0]} {parts[1]}")
            writer.write(_REFUSAL)
            await writer.drain()
        except (TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()


@contextlib.asynccontextmanager
async def running_sentinel(host: str = "127.0.0.1") -> AsyncIterator[Sentinel]:
    """Run a sentinel proxy on a free port of `host` for the duration of the block."""
    sentinel = Sentinel()
    server = await asyncio.start_server(sentinel._handle, host, 0)
    port = server.sockets[0].getsockname()[1]
    sentinel.url = f"http://{host}:{port}"
    async with server:
        yield sentinel
