"""A `research` task whose token budget runs short still yields a report, end to end: real
`shoal serve`, workers and the demo model over the sample corpus. The same question is asked
first without a budget, to measure what it spends; then with 80 %, 60 %, 45 % and 30 % of
that. Each skips retrievals to keep what the report and its review will cost, and ends with a
report that begins "Partial report:" and whose Gaps name every retrieval skipped: `completed`
when the reserve held, `budget_exceeded` when it did not, the report then written from what
was done; never without a report."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from shoal.demo.corpus import SAMPLE_QUESTION
from tests.e2e.procs import Cluster, finished, signed_in, submit, wait_task, wait_workers_online
from tests.e2e.test_research import _start, _upload_corpus

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]
FRACTIONS = (0.8, 0.6, 0.45, 0.3)


def _spent(detail: dict[str, Any]) -> int:
    return int(detail["usage"]["input_tokens"]) + int(detail["usage"]["output_tokens"])


async def _research(client: httpx.AsyncClient, sources: list[str],
                    budget: int | None = None) -> str:
    body: dict[str, Any] = {"workflow": "research", "description": SAMPLE_QUESTION,
                            "sources": sources}
    if budget is not None:
        body["budget"] = {"tokens": budget}
    return await submit(client, body)


async def test_a_budget_that_runs_short_still_yields_a_partial_report(stack: Cluster) -> None:
    url, procs = await _start(stack)
    async with signed_in(url, "alice") as client:
        await wait_workers_online(client, {"r1", "r2"}, procs)
        sources = await _upload_corpus(client)
        whole = await wait_task(client, await _research(client, sources), within=120,
                                procs=procs, what="the unbudgeted research", until=finished)
        assert whole["status"] == "completed", whole
        unbudgeted = _spent(whole)
        budgets = {f: int(unbudgeted * f) for f in FRACTIONS}
        tasks = {f: await _research(client, sources, b) for f, b in budgets.items()}
        for fraction, task_id in tasks.items():
            detail = await wait_task(client, task_id, within=120, procs=procs, until=finished,
                                     what=f"the research at {fraction:.0%} of its cost")
            skipped = [s["name"] for s in detail["subtasks"] if s["kind"] == "agent"
                       and "the task's budget cannot cover" in str(s.get("gap"))]
            resp = await client.get(f"/api/v1/tasks/{task_id}/report",
                                    headers={"Accept": "text/markdown"})
            print(f"research at {fraction:.0%} of {unbudgeted} tokens ({budgets[fraction]}): "
                  f"{detail['status']}, spent {_spent(detail)}, report {resp.status_code}, "
                  f"skipped {skipped}")
            assert detail["status"] in ("completed", "budget_exceeded"), detail
            if detail["status"] == "completed":
                assert _spent(detail) < budgets[fraction]
            assert skipped, detail["subtasks"]
            assert resp.status_code == 200, resp.text
            _the_report_says_it_is_partial(resp.text, skipped)


def _the_report_says_it_is_partial(report: str, skipped: list[str]) -> None:
    first, _, rest = report.partition("\n\n")
    assert first.startswith("Partial report:"), report[:300]
    gaps = rest.split("## Gaps", 1)[1].split("\n#", 1)[0]
    for name in skipped:
        assert name in first, (name, first)
        assert name in gaps, (name, gaps)
