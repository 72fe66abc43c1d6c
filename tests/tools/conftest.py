"""Shared fixtures of the tool tests: the fake model server, playing the demo model."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from starlette.applications import Starlette

from shoal.demo.fake.server import running_fake_server
from shoal.demo.model import create_demo_model_app


@pytest.fixture
def app() -> Starlette:
    """The demo model's app (its request log is readable)."""
    return create_demo_model_app()


@pytest.fixture
async def root(app: Starlette) -> AsyncIterator[str]:
    """The fake server's root URL, serving `app`."""
    async with running_fake_server(app) as url:
        yield url
