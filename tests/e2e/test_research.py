"""The `research` workflow end to end: real worker processes, the demo model through the fake
model server, `shoal mcp sources` over the uploaded sample corpus. The plan runs in four waves,
each after every gate of the one before; a search the sources cannot answer retries with an
expanded query, then becomes a gap the report lists; the review drops the sentence the writer
cited wrongly; the report's citations resolve to passages of the sources and to the SQL that ran
over the CSV. A question the sources cannot answer gives a report that says so, citing nothing."""

from __future__ import annotations

import io
import json
import re
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pypdf
import pytest

from shoal.demo.corpus import SAMPLE_QUESTION, UNANSWERABLE_QUESTION, corpus_files
from shoal.demo.research_script import UNSUPPORTED
from tests.e2e.procs import (
    Cluster,
    Proc,
    free_port,
    signed_in,
    sse_events,
    submit,
    wait_healthy,
    wait_port,
    wait_task,
    wait_workers_online,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]


def _at(value: str) -> datetime:
    return datetime.fromisoformat(value)


async def _upload_corpus(client: httpx.AsyncClient) -> list[str]:
    files = [("file", (p.name, p.read_bytes())) for p in corpus_files()]
    resp = await client.post("/api/v1/uploads", files=files)
    assert resp.status_code == 201, resp.text
    return [u["upload_id"] for u in resp.json()["uploads"]]


async def _start(stack: Cluster, names: tuple[str, ...] = ("r1", "r2")) -> tuple[str, list[Proc]]:
    """A control plane, the demo model and workers (`names`) of two slots each."""
    port, model_port = free_port(), free_port()
    url = f"http://127.0.0.1:{port}"
    await stack.create_user("alice")
    model = stack.start_demo_model(model_port)
    server = stack.start_server(port)
    tokens = [await stack.create_worker_token(n) for n in names]
    await wait_healthy(url, server)
    await wait_port(model_port, model)
    workers = [stack.start_worker(n, t, url, slots=2,
                                  model_url=f"http://127.0.0.1:{model_port}/v1")
               for n, t in zip(names, tokens, strict=True)]
    return url, [server, *workers]


async def test_research_over_the_sample_corpus_runs_in_waves_and_writes_a_cited_report(
    stack: Cluster,
) -> None:
    url, procs = await _start(stack)
    async with signed_in(url, "alice") as client:
        await wait_workers_online(client, {"r1", "r2"}, procs)
        sources = await _upload_corpus(client)
        task_id = await submit(client, {"workflow": "research", "description": SAMPLE_QUESTION,
                                        "sources": sources})
        detail = await wait_task(client, task_id, within=200, what="the research to finish",
                                 procs=procs,
                                 until=lambda d: d["status"] in ("completed", "failed"))
        assert detail["status"] == "completed", detail
        assert detail["phase"] == "complete"
        assert detail["waves"]["count"] == 3
        # the question's parts, counted by the engine: the tram rails are the one gap
        asked = detail["questions"]
        assert (asked["answered"], asked["of"]) == (3, 4), asked
        [gap] = [q for q in asked["questions"] if not q["answered"]]
        assert gap["question"] == "Has the heat damaged the tram rails?"
        assert gap["searched"]
        assert all(s.startswith("Tram rails") for s in gap["searched"])
        subs = detail["subtasks"]
        planned = {s["name"]: s for s in subs if s["kind"] == "agent" and s["plan_type"]}
        waves = sorted({s["wave"] for s in planned.values()})
        assert waves == [0, 1, 2]
        # No task of a wave started before the last gate of the wave before had decided
        # (a gated task completes when its gate decides).
        for wave in waves[1:]:
            decided = max(_at(s["completed_at"]) for s in planned.values()
                          if s["wave"] == wave - 1)
            for s in planned.values():
                if s["wave"] == wave:
                    assert _at(s["started_at"]) >= decided, (s["name"], wave)
        await _the_search_that_found_nothing_retried_then_became_a_gap(client, subs, planned)
        report = (await client.get(f"/api/v1/tasks/{task_id}/report",
                                   headers={"Accept": "text/markdown"})).text
        _the_report_is_cited_and_lists_its_gap(report, {p.name for p in corpus_files()})
        # the writer's mistake, scripted, caught by Shoal's check in code, repaired once
        checks = [s for s in subs if s["kind"] == "check"]
        assert [s["status"] for s in checks] == ["completed", "completed"]
        first_check = (await client.get(f"/api/v1/subtasks/{checks[0]['subtask_id']}")).json()
        [failed] = first_check["output"]["parsed"]["failed"]
        assert failed["sentence"].startswith(UNSUPPORTED)
        assert "its quote does not say 50000" in failed["reason"]
        assert UNSUPPORTED not in report
        assert [s["name"] for s in subs if s["kind"] == "correct"
                and s["target_id"] == planned["Report"]["subtask_id"]] == ["Repair: Report"]
        cited = detail["citations"]
        assert (cited["precision"], cited["resolution"]) == (1.0, 1.0), cited
        assert cited["cited"] >= 3
        check = report.split("## Citation check", 1)[1].split("## Sources", 1)[0]
        assert "Checked by Shoal's code, not a model" in check
        assert "citation precision 100%" in check
        assert report.startswith(f"# {SAMPLE_QUESTION}")
        assert "built-in demo model" in report.split("##", 1)[0]
        sources = (await client.get(f"/api/v1/tasks/{task_id}/citations")).json()["sources"]
        assert [c["number"] for c in sources] == list(range(1, len(sources) + 1))
        passage = next(c for c in sources if c.get("quote"))
        assert passage["quote"] in " ".join(passage["text"].split())
        assert any(c.get("sql", "").startswith("SELECT") and c["rows"] for c in sources)
        pdf = await client.get(f"/api/v1/tasks/{task_id}/report.pdf")
        assert pdf.status_code == 200, pdf.text[:300]
        text = "".join(page.extract_text() for page in pypdf.PdfReader(io.BytesIO(
            pdf.content)).pages)
        for heading in ("Executive Summary", "Key Findings", "Gaps", "Sources"):
            assert heading in text
        events = await sse_events(client, task_id, until={"task_complete"}, last_event_id=0)
        starts = [e["data"]["message"] for e in events if e["type"] == "notice"
                  and str(e["data"].get("message", "")).startswith("Wave ")]
        assert [m.split(":")[0] for m in starts] == ["Wave 2 of 3 starts", "Wave 3 of 3 starts"]
        named = await _named_events(client, task_id)
        phases = [e["data"]["phase"] for _, e in named if e["type"] == "phase"]
        assert phases == ["initializing", "planning", "planned", "executing", "synthesizing",
                          "complete"]
        assert [n for n, _ in named if n in ("project_created", "project_complete")] == [
            "project_created", "project_complete"]
        assert {n for n, _ in named} >= {"task_started", "task_completed"}
        started = [d["data"]["name"] for n, d in named if n == "task_started"]
        assert sorted(started) == sorted(planned)  # each planned task started once
        done = next(e for n, e in named if n == "project_complete")
        assert done["data"]["report_url"] == f"/api/v1/tasks/{task_id}/report"


async def _named_events(client: httpx.AsyncClient,
                        task_id: str) -> list[tuple[str, dict[str, Any]]]:
    """The task's events from the start under its workflow's names (seed 002's), until its
    last phase: (the SSE event name, the event)."""
    found: list[tuple[str, dict[str, Any]]] = []
    name = ""
    async with client.stream("GET", f"/api/v1/tasks/{task_id}/events",
                             params={"names": "workflow", "since": 0}) as resp:
        assert resp.status_code == 200
        async for line in resp.aiter_lines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                found.append((name, json.loads(line[6:])))
                if found[-1][1]["type"] == "phase" and found[-1][1]["data"]["phase"] in (
                        "complete", "failed"):
                    return found
    raise AssertionError(f"no last phase: {[n for n, _ in found]}")


async def _the_search_that_found_nothing_retried_then_became_a_gap(
    client: httpx.AsyncClient, subs: list[dict[str, Any]], planned: dict[str, Any],
) -> None:
    rails = planned["Tram rails"]
    assert rails["gap"] is not None
    retry = next(s for s in subs if s["kind"] == "correct" and s["target_id"] ==
                 rails["subtask_id"])
    first = (await client.get(f"/api/v1/subtasks/{rails['subtask_id']}")).json()
    again = (await client.get(f"/api/v1/subtasks/{retry['subtask_id']}")).json()
    assert "# Another try" in again["description"]
    assert again["output"]["parsed"]["query"] != "Tram rail buckling incidents"  # expanded
    assert first["output"]["text"].startswith("[gap] Tram rails")
    judges = [s for s in subs if s["kind"] == "judge" and s["target_id"] == rails["subtask_id"]]
    assert len(judges) == 2  # the first answer and the retry's, each judged
    for name in ("Heat days by district", "What the city does", "Synthesis", "Report"):
        assert planned[name]["gap"] is None, name


def _the_report_is_cited_and_lists_its_gap(report: str, documents: set[str]) -> None:
    for heading in ("## Executive Summary", "## Key Findings", "## Detailed Analysis",
                    "## Gaps", "## Methodology Notes", "## Sources"):
        assert heading in report
    body, _, sources = report.partition("## Sources")
    listed = dict(re.findall(r"^- \[(\d+)\] (.+)$", sources, flags=re.MULTILINE))
    cited = set(re.findall(r"\[(\d+)\]", body))
    assert cited
    assert cited <= set(listed)  # every citation resolves
    for citation in listed.values():
        assert citation.startswith("SQL: SELECT") or citation.split(",")[0].split(" ")[0] in \
            documents or any(citation.startswith(d) for d in documents), citation
    gaps = report.split("## Gaps", 1)[1].split("##", 1)[0]
    assert "3 of 4 parts of the question answered." in gaps
    assert "- Has the heat damaged the tram rails? Not answered. Searched: Tram rails: " in gaps
    assert "Eastfield" in body  # the SQL's rows, from the CSV
    assert "43" in body


async def test_a_question_the_sources_cannot_answer_gives_a_report_that_says_so(
    stack: Cluster,
) -> None:
    url, procs = await _start(stack)
    async with signed_in(url, "alice") as client:
        await wait_workers_online(client, {"r1", "r2"}, procs)
        sources = await _upload_corpus(client)
        task_id = await submit(client, {"workflow": "research",
                                        "description": UNANSWERABLE_QUESTION,
                                        "sources": sources})
        detail = await wait_task(client, task_id, within=200, what="the research to finish",
                                 procs=procs,
                                 until=lambda d: d["status"] in ("completed", "failed"))
        assert detail["status"] == "completed", detail
        report = (await client.get(f"/api/v1/tasks/{task_id}/report",
                                   headers={"Accept": "text/markdown"})).text
        body = report.split("## Sources", 1)[0]
        assert not re.findall(r"\[\d+\]", body), report  # no citation…
        assert "The sources do not answer this question" in report  # …and it says so
        gaps = report.split("## Gaps", 1)[1].split("##", 1)[0]
        assert "Passages" in gaps  # the search found nothing, retried, and says so


async def test_a_plan_a_person_edits_is_the_one_that_runs(stack: Cluster) -> None:
    """`approve_plan`: the plan waits at a checkpoint; an edit that breaks its schema is a 422
    and changes nothing; the edited plan is what runs."""
    url, procs = await _start(stack)
    async with signed_in(url, "alice") as client:
        await wait_workers_online(client, {"r1", "r2"}, procs)
        sources = await _upload_corpus(client)
        task_id = await submit(client, {"workflow": "research", "description": SAMPLE_QUESTION,
                                        "sources": sources,
                                        "parameters": {"approve_plan": True}})
        await wait_task(client, task_id, within=60, what="the plan to wait", procs=procs,
                        until=lambda d: d["status"] == "checkpoint_pending")
        page = (await client.get("/api/v1/checkpoints", params={
            "task_id": task_id, "status": "pending_review"})).json()
        [plan] = page["checkpoints"]
        assert '"type": "retrieval_nlq"' in plan["question"]
        assert (await client.get(f"/api/v1/tasks/{task_id}")).json()["phase"] == "planned"
        answer = f"/api/v1/checkpoints/{plan['checkpoint_id']}/answer"
        bad = await client.post(answer, json={"answer": '{"subtasks": []}'})
        assert bad.status_code == 422, bad.text
        mine = {"subtasks": [
            {"name": "Figures", "type": "retrieval_nlq",
             "description": "Which district had the most heat days in the latest year?"},
            {"name": "Report", "type": "write_report", "description": "The report",
             "dependencies": ["Figures"]}]}
        ok = await client.post(answer, json={"answer": json.dumps(mine)})
        assert ok.status_code == 200, ok.text
        detail = await wait_task(client, task_id, within=120, what="the research to finish",
                                 procs=procs,
                                 until=lambda d: d["status"] in ("completed", "failed"))
        assert detail["status"] == "completed", detail
        ran = sorted(s["name"] for s in detail["subtasks"]
                     if s["kind"] == "agent" and s["plan_type"])
        assert ran == ["Figures", "Report"]


def _indexes(folder: Path) -> dict[str, tuple[int, int]]:
    """The index files in `folder` (passages and graphs): name → (size, mtime_ns)."""
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.glob("*")
            if p.is_file() and p.suffix in (".sqlite", ".json")}


async def test_a_second_task_over_the_same_files_reuses_their_index(stack: Cluster) -> None:
    """Sources are indexed once per content: a second task over the same files on the worker
    builds no index (no file of the worker's index folder is written again)."""
    url, procs = await _start(stack, ("r1",))
    folder = stack.root / "worker-r1" / "index"
    async with signed_in(url, "alice") as client:
        await wait_workers_online(client, {"r1"}, procs)
        for attempt in ("first", "second"):
            sources = await _upload_corpus(client)  # uploaded again: the same content
            task_id = await submit(client, {"workflow": "research",
                                            "description": SAMPLE_QUESTION,
                                            "sources": sources})
            detail = await wait_task(client, task_id, within=200, what=f"the {attempt} task",
                                     procs=procs,
                                     until=lambda d: d["status"] in ("completed", "failed"))
            assert detail["status"] == "completed", detail
            if attempt == "first":
                built = _indexes(folder)
                documents = [p for p in corpus_files() if p.suffix != ".csv"]
                assert len([n for n in built if n.endswith(".sqlite")]) == len(documents)
                assert any(n.endswith(".json") for n in built)  # their knowledge graphs
        assert _indexes(folder) == built
