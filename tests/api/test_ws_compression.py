"""WebSockets go uncompressed unless `ws_compression` is set: a compressor per socket costs
memory for as long as it is open and CPU for every frame (benchmarks/README: fan-out)."""

from __future__ import annotations

from pathlib import Path

from websockets.asyncio.client import connect

from shoal.api.server import RunningServer, running_server
from tests.conftest import make_settings


async def _extensions(url: str) -> str | None:
    """The extensions the control plane agreed to for a client that offers permessage-deflate
    (the `websockets` client offers it by default, as browsers do)."""
    async with connect(url.replace("http://", "ws://") + "/ws") as ws:
        assert ws.response is not None
        return ws.response.headers.get("Sec-WebSocket-Extensions")


async def test_sockets_are_not_compressed_by_default(server: RunningServer) -> None:
    assert await _extensions(server.url) is None


async def test_compression_is_agreed_when_set(tmp_path: Path) -> None:
    async with running_server(make_settings(tmp_path, ws_compression=True)) as srv:
        assert "permessage-deflate" in (await _extensions(srv.url) or "")
