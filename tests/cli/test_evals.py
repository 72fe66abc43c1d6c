"""`shoal eval research` as a person runs it, in a subprocess: retrieval measured, two
questions run as research tasks on an embedded Shoal with the demo model, the tables printed
and the results written as JSON with every figure present and in range; and a question run on
a server the user names, as the user signed in there. The figures' values are not asserted:
they measure the research workflow, which changes."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from shoal.evals.research.goldset import load_set
from tests.cli.harness import Plane, start

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]


def _ratio(value: Any, *, may_be_absent: bool = False) -> bool:
    if value is None:
        return may_be_absent
    return isinstance(value, int | float) and 0 <= value <= 1


def test_eval_research_runs_two_questions_end_to_end_and_writes_every_figure(
        tmp_path: Path) -> None:
    """--limit 2 on the embedded demo stack: both tasks end, each part has an outcome, and
    recall, MRR, answered, gaps, citation figures (or null: not measured), other-corpus
    sentences, facts and each report are all in the JSON; the user's sessions are left
    alone."""
    proc, _ = start(tmp_path, "eval", "research", "--limit", "2", "--embeddings", "fake",
                    "--output", "results.json")
    out, err = proc.communicate(timeout=220)
    assert proc.returncode == 0, out[-3000:] + err[-3000:]
    assert "recall@5" in out
    assert "End to end: each question as a research task" in out
    results = json.loads((tmp_path / "results.json").read_text())
    ids = [q.id for q in load_set().questions[:2]]
    assert results["set"]["questions"] == ids

    for mode in ("bm25", "hybrid"):
        measured = results["retrieval"][mode]
        assert _ratio(measured["recall_at_5"]), measured
        assert _ratio(measured["mrr"]), measured
        assert measured["parts"]
    assert results["retrieval"]["bm25"]["recall_at_5"] >= 0.5

    run = results["end_to_end"]
    assert run["model"].startswith("DEMO model")
    figures = run["figures"]
    assert figures["tasks"] == 2, run["questions"]
    for name in ("answered", "gaps_listed", "facts_found"):
        assert _ratio(figures[name]), (name, figures)
    for name in ("citation_precision", "citation_resolution"):
        assert _ratio(figures[name], may_be_absent=figures["citations_measured"] == 0), figures
    assert isinstance(figures["foreign_sentences"], int)
    assert figures["foreign_sentences"] >= 0
    assert set(figures["errors"]) == {"answerable_as_gap", "unanswerable_not_gap"}
    assert figures["judged"] is None

    assert [q["id"] for q in run["questions"]] == ids
    for question in run["questions"]:
        assert question["status"] in ("completed", "failed", "budget_exceeded", "cancelled")
        assert question["task_id"]
        assert {p["outcome"] for p in question["parts"]} <= {"answered", "gap", "missing"}
        assert _ratio(question["answered"])
        assert _ratio(question["facts_found"])
        # kept, since the embedded Shoal's data is gone when it ends
        assert bool(question["report"]) == question["has_report"], question
    # The embedded Shoal signs nobody in: no session was kept for `shoal` commands.
    assert not (tmp_path / "config" / "shoal" / "credentials.json").exists()


async def test_eval_research_runs_on_the_server_named_as_the_user_signed_in(
        plane: Plane, tmp_path: Path) -> None:
    """--server URL (signed in by SHOAL_TOKEN): the question is a research task of that user
    on that server, reading the set's ten files, and scored from it."""
    output = tmp_path / "results.json"

    def evaluate() -> tuple[str, str, int]:
        proc, _ = start(plane.base, "eval", "research", "--server", plane.server.url,
                        "--questions", "libffi-safety", "--embeddings", "none",
                        "--output", str(output), **plane.env)
        out, err = proc.communicate(timeout=200)
        return out, err, proc.returncode

    out, err, code = await asyncio.to_thread(evaluate)
    assert code == 0, out[-3000:] + err[-3000:]
    results = json.loads(output.read_text())
    assert results["retrieval"]["hybrid"] is None
    run = results["end_to_end"]
    assert run["server"] == plane.server.url
    [question] = run["questions"]
    assert [p["part"] for p in question["parts"]] == ["a", "b", "c"]
    task = (await plane.http.get(f"/api/v1/tasks/{question['task_id']}")).json()
    assert task["workflow"] == "research"
    assert task["status"] == question["status"]
    assert len(task["sources"]) == len(load_set().sources)


async def test_a_refused_submission_ends_the_run_with_the_servers_reason(plane: Plane) -> None:
    """A question the server refuses (longer than a task's description may be) ends the run
    with that one refusal, naming the field, not with a group of errors."""
    from shoal.api.schemas.base import MAX_DESCRIPTION
    from shoal.cli.client import ApiError, ShoalClient
    from shoal.cli.credentials import Credentials
    from shoal.evals.research.reading import foreign_terms
    from shoal.evals.research.runs import run_set

    gold = load_set().chosen(["libffi-safety"])
    long_part = gold.questions[0].parts[0].model_copy(
        update={"question": "Why? " * (MAX_DESCRIPTION // 4)})
    gold = gold.model_copy(update={"questions": [
        gold.questions[0].model_copy(update={"parts": [long_part]})]})
    creds = Credentials(server=plane.server.url, token=plane.env["SHOAL_TOKEN"])
    async with ShoalClient(creds) as client:
        with pytest.raises(ApiError) as refused:
            await run_set(client, gold, terms=foreign_terms(gold.files))
    assert refused.value.status == 422
    assert "description" in str(refused.value.details)
