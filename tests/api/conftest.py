"""The API tests' shared fixtures: a real control plane on a port, a signed-in user's client
and an echo worker (a module that needs other settings overrides `server`)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from shoal.api.server import RunningServer, running_server
from shoal.config import Settings
from shoal.worker.agent import Worker
from tests.runtime.harness import echo_worker, login


@pytest.fixture
async def server(settings: Settings) -> AsyncIterator[RunningServer]:
    """A control plane on the default test settings."""
    async with running_server(settings) as srv:
        yield srv


@pytest.fixture
async def client(server: RunningServer, settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    """Signed in as alice; closed even when the test fails."""
    signed_in = await login(server, settings)
    try:
        yield signed_in
    finally:
        await signed_in.aclose()


@pytest.fixture
async def worker(server: RunningServer, settings: Settings) -> AsyncIterator[Worker]:
    """A worker with the echo tool, connected to `server`."""
    async with echo_worker(server, settings) as w:
        yield w
