"""Fixtures for the worker tests: a fake control plane and a gate tool."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from websockets.asyncio.server import serve

from tests.worker.fake_plane import FakeControlPlane, GateTool


@pytest.fixture
async def plane() -> AsyncIterator[FakeControlPlane]:
    """A fake control plane listening on a free local port."""
    fake = FakeControlPlane()
    async with serve(fake.handle, "127.0.0.1", 0, process_request=fake.check) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        fake.url = f"http://127.0.0.1:{port}"
        yield fake


@pytest.fixture
def gate() -> GateTool:
    """A fresh gate tool."""
    return GateTool()
