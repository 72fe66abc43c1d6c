"""Fixtures of the end-to-end tests: clusters of real processes, and their output on failure."""

from __future__ import annotations

from collections.abc import AsyncIterator, Generator, Iterator
from pathlib import Path

import pytest

from tests.e2e.procs import ACTIVE, Cluster, cluster

FAILED = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Remember on the test item whether its body failed."""
    report = yield
    if report.when == "call" and report.failed:
        item.stash[FAILED] = True
    return report


@pytest.fixture(autouse=True)
def _output_of_shared_processes(request: pytest.FixtureRequest) -> Iterator[None]:
    """When a test fails, print the output of processes that outlive it (module fixtures)."""
    yield
    if request.node.stash.get(FAILED, False):
        for group in ACTIVE:
            group.print_logs()


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[Cluster]:
    """A cluster on SQLite under this test's temporary directory."""
    async with cluster(tmp_path) as group:
        yield group
