"""Fixtures of the end-to-end tests: a `Cluster` of real processes, killed after each test."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.e2e.procs import Cluster, cluster


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[Cluster]:
    """A cluster on SQLite under this test's temporary directory."""
    async with cluster(tmp_path) as group:
        yield group
