"""Every fault of the matrix (`tests/faults/matrix.py`) at a reduced size: each task ends, no
step is lost or completed twice, and the reconnecting client misses no event and gets none
twice. `benchmarks/faults.py` prints the same table at full size."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import POSTGRES_URL, REDIS_URL, require_cli, require_service
from tests.faults.matrix import BAD_PLANS, FAULTS, REDUCED, Fault, run_fault

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]


@pytest.mark.parametrize("fault", FAULTS, ids=[f.name for f in FAULTS])
async def test_nothing_is_lost_or_done_twice(fault: Fault, tmp_path: Path) -> None:
    if fault.privileged and os.geteuid() != 0:
        pytest.skip("this fault needs root (a namespace, a mount or restarting a service)")
    if fault.database == "postgres":
        require_service(POSTGRES_URL, "PostgreSQL", "SHOAL_TEST_POSTGRES_URL")
    if fault.redis:
        require_service(REDIS_URL, "Redis", "SHOAL_TEST_REDIS_URL")
    if fault.clis:
        require_cli("codex")
    report = await run_fault(fault, tmp_path, REDUCED)
    assert report.finished == report.tasks, report
    assert report.completed == report.tasks, report
    assert report.lost == 0, report
    assert report.twice == 0, report
    assert report.events_lost == 0, report
    assert report.events_twice == 0, report
    assert report.tracebacks == 0, report
    assert report.processes_left == 0, report
    if fault.workflows is BAD_PLANS:  # each bad answer was caught and a fallback plan ran
        assert len(report.plan_sources) == len(BAD_PLANS), report
        assert "planner" not in report.plan_sources, report
