"""`/api/v1/workflows` and document workflows submitted through the API, run by a real worker.

The worker's echo tool answers with its instructions, so each role's prompt decides its
answer: the critic's starts with the draft, which holds a NEEDS_REVISION verdict, so the
loop goes back until its cap.
"""

from __future__ import annotations

import asyncio
import io
import os
import subprocess
import sys
import zipfile
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from shoal.api.server import RunningServer, running_server
from shoal.config import Settings
from shoal.workflows.document import DocStepKind
from tests.runtime.harness import (
    demo_plane,
    echo_worker,
    login,
    sse_events,
    wait_for_status,
)

REVIEW = """\
name: review
version: 3
description: Draft, critique, polish; the critic may send the draft back.
parameters:
  max_rounds: {type: integer, default: 1, minimum: 0, maximum: 3}
  tone: {type: string, default: plain, choices: [plain, formal]}
roles:
  writer:
    prompt: 'Draft {"verdict": "NEEDS_REVISION"} on {query}, {tone}. Feedback: {feedback}'
    tools: [echo]
  critic:
    prompt: 'Critique: {draft}'
    tools: [echo]
    output:
      type: object
      required: [verdict]
      properties:
        verdict: {enum: [APPROVED, NEEDS_REVISION]}
  editor:
    prompt: "Polish: {draft}"
    tools: [echo]
steps:
  - {id: write, kind: agent, role: writer, writes: draft}
  - {id: critique, kind: agent, role: critic, after: [write], writes: verdict}
  - {id: polish, kind: agent, role: editor, after: [critique], writes: final_report}
loops:
  - from: critique
    to: write
    when: {entry: verdict, field: verdict, equals: NEEDS_REVISION}
    max: "{max_rounds}"
"""


@pytest.fixture
async def server(settings: Settings) -> AsyncIterator[RunningServer]:
    folder = settings.data_dir / "workflows"
    folder.mkdir(parents=True)
    (folder / "review.yaml").write_text(REVIEW)
    (folder / "broken.yaml").write_text(REVIEW.replace("name: review", "name: broken")
                                        .replace("kind: agent, role: editor",
                                                 "kind: agent, role: nobody"))
    async with running_server(settings) as srv:
        yield srv



def cli(server: RunningServer, client: httpx.AsyncClient,
        tmp_path: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    """`shoal …` as a user signed in to `server` runs it (its own data folder)."""
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("SHOAL_")},
           "SHOAL_URL": server.url, "NO_COLOR": "1", "COLUMNS": "200",
           "SHOAL_DATA_DIR": str(tmp_path / "cli"),
           "SHOAL_TOKEN": client.headers["Authorization"].removeprefix("Bearer ")}

    def shoal(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(Path(sys.executable).with_name("shoal")), *args], env=env,
                              capture_output=True, text=True, timeout=120)

    return shoal


async def test_workflows_are_listed_and_shown_to_a_signed_in_user(
    server: RunningServer, client: httpx.AsyncClient
) -> None:
    async with httpx.AsyncClient(base_url=server.url) as anon:
        assert (await anon.get("/api/v1/workflows")).status_code == 401
        assert (await anon.get("/api/v1/workflows/schema")).status_code == 401
    listed = [w["name"] for w in (await client.get("/api/v1/workflows")).json()["workflows"]]
    # The built-ins, then the server's own (not the broken document).
    assert listed == ["dag", "pipeline", "proposal", "research", "supervisor", "review"]
    dag = (await client.get("/api/v1/workflows/dag")).json()
    assert dag["description"]
    assert [(s["id"], s["kind"], s["each"]) for s in dag["document"]["steps"]] == [
        ("planner", "expand", "coder")]  # seed 004, run by the one interpreter
    assert dag["document"]["roles"]["planner"]["builtin"] == "planner"
    review = (await client.get("/api/v1/workflows/review")).json()
    assert review["document"]["version"] == 3
    assert review["document"]["loops"][0]["from"] == "critique"
    missing = await client.get("/api/v1/workflows/nope")
    assert missing.status_code == 404
    assert missing.json()["error"] == "not_found"
    schema = (await client.get("/api/v1/workflows/schema")).json()
    assert set(schema["$defs"]["DocStepKind"]["enum"]) == {k.value for k in DocStepKind}
    assert {"name", "version", "roles", "steps"} <= set(schema["required"])


@pytest.mark.parametrize(("body", "field"), [
    ({"workflow": "nope"}, "workflow"),
    ({"workflow": "review", "parameters": {"max_rounds": 9}}, "parameters.max_rounds"),
    ({"workflow": "review", "parameters": {"tone": "angry"}}, "parameters.tone"),
    ({"workflow": "review", "parameters": {"rounds": 1}}, "parameters.rounds"),
    ({"workflow": "dag", "parameters": {"max_rounds": 1}}, "parameters.max_rounds"),
    ({"workflow": "review", "plan": [{"name": "a", "description": "b"}]}, "plan"),
    ({"workflow": "pipeline", "skip": ["review", "write"]}, "skip.1"),
    ({"workflow": "pipeline", "skip": ["nowhere"]}, "skip.0"),
    ({"workflow": "dag", "skip": ["review"]}, "skip.0"),
    ({"workflow": "pipeline", "insert": [{"after": "plan", "id": "x", "prompt": "Hi"}]},
     "insert.0.after"),
    ({"workflow": "pipeline", "insert": [{"after": "write", "id": "x", "prompt": "{nope}"}]},
     "insert.0.prompt"),
    ({"workflow": "dag", "insert": [{"after": "write", "id": "x", "prompt": "Hi"}]},
     "insert.0.after"),
])
async def test_a_bad_workflow_or_parameter_is_a_422_naming_it(
    server: RunningServer, settings: Settings, client: httpx.AsyncClient, body: dict[str, Any],
    field: str,
) -> None:
    async with echo_worker(server, settings):
        resp = await client.post("/api/v1/tasks", json={"description": "Cats", **body})
    assert resp.status_code == 422, resp.text
    assert resp.json()["error"] == "validation_error"
    assert [d["field"] for d in resp.json()["details"]] == [field]
    assert (await client.get("/api/v1/tasks")).json()["tasks"] == []  # nothing half-stored


async def test_a_misspelt_workflow_is_told_what_it_may_mean(
    server: RunningServer, settings: Settings, client: httpx.AsyncClient
) -> None:
    """A workflow name close to one offered (the server's, or the user's own) gets "did you
    mean" in the 422 of a submission and the 404 of a lookup, with the names in the details'
    `did_you_mean`; a name close to none gets neither."""
    async with echo_worker(server, settings):
        refused = await client.post("/api/v1/tasks", json={"description": "Cats",
                                                           "workflow": "pipline"})
        mine = await client.post("/api/v1/tasks", json={"description": "Cats",
                                                        "workflow": "reveiw"})
        far = await client.post("/api/v1/tasks", json={"description": "Cats",
                                                       "workflow": "zzz"})
    [detail] = refused.json()["details"]
    assert (refused.status_code, detail["field"], detail["type"]) == (
        422, "workflow", "unknown_workflow")
    assert detail["message"].startswith("no workflow named 'pipline'; did you mean "
                                        "'pipeline'?")
    assert detail["did_you_mean"] == ["pipeline"]
    assert mine.json()["details"][0]["did_you_mean"] == ["review"]  # the server's own
    assert far.json()["details"][0]["did_you_mean"] == []
    assert "did you mean" not in far.json()["details"][0]["message"]
    looked_up = await client.get("/api/v1/workflows/supervisr")
    assert looked_up.status_code == 404
    assert "did you mean 'supervisor'?" in looked_up.json()["message"]
    assert looked_up.json()["details"] == {"did_you_mean": ["supervisor"]}


async def test_a_document_workflow_runs_its_loop_to_the_cap_on_a_worker(
    server: RunningServer, settings: Settings, client: httpx.AsyncClient
) -> None:
    async with echo_worker(server, settings):
        resp = await client.post("/api/v1/tasks", json={
            "description": "Cats", "workflow": "review",
            "parameters": {"max_rounds": 1, "tone": "formal"}})
        assert resp.status_code == 201, resp.text
        task_id = resp.json()["task_id"]

        detail = await wait_for_status(client, task_id, "completed", "failed")
    assert detail["status"] == "completed", detail
    assert detail["workflow"] == "review"
    keys = sorted(s["key"] for s in detail["subtasks"])
    assert keys == ["critique#1", "critique#2", "polish#1", "write#1", "write#2"]
    prompts = {s["key"]: (await client.get(f"/api/v1/subtasks/{s['subtask_id']}")).json()
               for s in detail["subtasks"]}
    first, second = prompts["write#1"]["description"], prompts["write#2"]["description"]
    assert "on Cats, formal. Feedback: " in first
    assert first.endswith("Feedback: ")
    assert '"verdict": "NEEDS_REVISION"' in second.split("Feedback: ", 1)[1]  # carried back


async def test_the_cli_lists_shows_and_submits_a_document_workflow(
    server: RunningServer, settings: Settings, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    shoal = cli(server, client, tmp_path)

    listed = await asyncio.to_thread(shoal, "workflows", "list")
    assert listed.returncode == 0, listed.stderr
    assert "review" in listed.stdout
    shown = await asyncio.to_thread(shoal, "workflows", "show", "review")
    assert shown.returncode == 0, shown.stderr
    assert '"max_rounds"' in shown.stdout
    async with echo_worker(server, settings):
        done = await asyncio.to_thread(shoal, "submit", "--workflow", "review", "--param",
                                       "max_rounds=0", "--param", "tone=formal", "Cats",
                                       "--follow")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Running the review workflow" in done.stdout
    refused = await asyncio.to_thread(shoal, "submit", "--workflow", "review", "--param",
                                      "max_rounds=7", "Cats")
    not_optional = await asyncio.to_thread(shoal, "submit", "--workflow", "review", "--skip",
                                           "critique", "Cats")
    assert not_optional.returncode != 0
    assert "skip.0" in not_optional.stdout + not_optional.stderr
    assert refused.returncode != 0
    assert "max_rounds" in refused.stdout + refused.stderr
    # A workflow of one's own: added from a file, listed as yours, removed.
    (tmp_path / "mine.yaml").write_text(REVIEW.replace("name: review", "name: mine"))
    (tmp_path / "broken.yaml").write_text(REVIEW.replace("role: editor", "role: nobody"))
    added = await asyncio.to_thread(shoal, "workflows", "add", str(tmp_path / "mine.yaml"))
    assert added.returncode == 0, added.stderr
    assert "Added mine v3" in added.stdout
    mine = await asyncio.to_thread(shoal, "workflows", "list")
    assert any("│ mine " in line and " v3 " in line
               for line in mine.stdout.splitlines()), mine.stdout
    broken = await asyncio.to_thread(shoal, "workflows", "add", str(tmp_path / "broken.yaml"))
    assert broken.returncode == 1
    assert "document: document:25: steps.2.role: no role 'nobody' in roles" in broken.stderr
    nowhere = await asyncio.to_thread(shoal, "submit", "--workflow", "review", "--insert",
                                      "polish:check:Check {draft}", "Cats")
    assert nowhere.returncode == 1
    assert "--insert (insert.0.after): step 'polish' takes no inserted role" in nowhere.stderr
    malformed = await asyncio.to_thread(shoal, "submit", "--insert", "check it", "Cats")
    assert malformed.returncode == 2
    assert "AFTER:ID:PROMPT" in malformed.stderr
    removed = await asyncio.to_thread(shoal, "workflows", "remove", "mine")
    assert (removed.returncode, removed.stdout.strip()) == (0, "Removed mine.")


async def test_the_pipeline_without_its_review_ends_with_the_first_draft(
    settings: Settings,
) -> None:
    async with demo_plane(settings) as (_srv, client):
        resp = await client.post("/api/v1/tasks", json={
            "description": "Cats in cities", "workflow": "pipeline",
            "skip": ["review"]})
        assert resp.status_code == 201, resp.text
        task_id = resp.json()["task_id"]

        detail = await wait_for_status(client, task_id, "completed", "failed")
    assert detail["status"] == "completed", detail
    assert sorted(s["key"] for s in detail["subtasks"]) == [
        "plan#1", "research#1.1", "research#1.2", "research#1.3", "write#1"]


async def test_a_role_of_ones_own_runs_where_the_pipeline_allows_it(settings: Settings) -> None:
    """`insert`: a fact-checker after the writer, on a real worker; the reviewer sees it."""
    async with demo_plane(settings) as (_srv, client):
        resp = await client.post("/api/v1/tasks", json={
            "description": "Cats in cities", "workflow": "pipeline",
            "parameters": {"max_revisions": 0},
            "insert": [{"after": "write", "id": "factcheck",
                        "prompt": "Check the facts of this draft: {draft}"}]})
        assert resp.status_code == 201, resp.text
        detail = await wait_for_status(client, resp.json()["task_id"], "completed",
                                       "failed")
        subs = {s["key"]: s for s in detail["subtasks"]}
        review = (await client.get(
            f"/api/v1/subtasks/{subs['review#1']['subtask_id']}")).json()
        check = (await client.get(
            f"/api/v1/subtasks/{subs['factcheck#1']['subtask_id']}")).json()
    assert detail["status"] == "completed", detail
    assert check["description"].startswith("Check the facts of this draft: # Cats in cities")
    assert subs["factcheck#1"]["completed_at"] <= subs["review#1"]["started_at"]
    assert "Notes from factcheck (a role the user added):" in review["description"]


@pytest.mark.parametrize("revisions", [1, 0])
async def test_the_pipeline_researches_in_parallel_and_revises_once(
    settings: Settings, revisions: int
) -> None:
    """Seed 000 on the demo model and two one-slot workers: researchers overlap on both; the
    reviewer sends the first draft back, with its feedback in the writer's second prompt;
    with max_revisions=0 the first review is the last."""
    async with demo_plane(settings, workers=("w1", "w2"), slots=1) as (srv, client):
        resp = await client.post("/api/v1/tasks", json={
            "description": "Cats in cities", "workflow": "pipeline",
            "parameters": {"max_revisions": revisions}})
        assert resp.status_code == 201, resp.text
        task_id = resp.json()["task_id"]

        detail = await wait_for_status(client, task_id, "completed", "failed")
        subs = {s["key"]: s for s in detail["subtasks"]}
        state = (await client.get(f"/api/v1/tasks/{task_id}/state")).json()
        other = await login(srv, settings, name="bob")
        try:
            hidden = await other.get(f"/api/v1/tasks/{task_id}/state")
        finally:
            await other.aclose()
        second = (await client.get(
            f"/api/v1/subtasks/{subs['write#2']['subtask_id']}")).json() \
            if "write#2" in subs else None
        archive = (await client.get(f"/api/v1/tasks/{task_id}/download")).content
        log = (await client.get(f"/api/v1/tasks/{task_id}/messages")).json()
    assert detail["status"] == "completed", detail
    # The message log: every hand-over, in order (the writer reads the research again, with
    # the reviewer's feedback, on a revision).
    said = [(m["kind"], m["sender"], m["recipient"], m["entry"], m["revision"])
            for m in log["messages"]]
    first = [("request", "user", "planner", None, None),
             *[("output", "planner", "researcher", "plan", 1)] * 3,
             *[("output", "researcher", "writer", "research", 1)] * 3,
             ("output", "writer", "reviewer", "draft", 1)]
    assert said == first + ([("feedback", "reviewer", "writer", "review", 1),
                             *[("output", "researcher", "writer", "research", 1)] * 3,
                             ("output", "writer", "reviewer", "draft", 2)] if revisions else [])
    assert log["total"] == len(said)
    stamps = [m["timestamp"] for m in log["messages"]]
    assert stamps == sorted(stamps)
    research = [subs[f"research#1.{i}"] for i in (1, 2, 3)]
    assert len({r["assigned_worker_id"] for r in research}) == 2
    assert any(a["started_at"] < b["completed_at"] and b["started_at"] < a["completed_at"]
               and a["assigned_worker_id"] != b["assigned_worker_id"]
               for a in research for b in research if a is not b)
    assert hidden.status_code == 404
    entries = state["entries"]
    assert state["workflow"] == "pipeline"
    assert entries["plan"][0]["value"]["sub_questions"][0] == "What is Cats in cities?"
    assert [len(r["value"]) for r in entries["research"]] == [3]
    assert all("Findings on" in v for v in entries["research"][0]["value"])
    assert [r["revision"] for r in entries["draft"]] == list(range(1, revisions + 2))
    # The final report is a file of the task too: the latest draft, as report.md.
    report = zipfile.ZipFile(io.BytesIO(archive)).read("report.md").decode()
    assert report.strip() == entries["draft"][-1]["value"].strip()
    assert state["state"]["response"] == entries["draft"][-1]["value"]
    assert entries["review"][0]["value"]["verdict"] == "NEEDS_REVISION"
    if revisions:
        assert entries["review"][-1]["value"]["verdict"] == "APPROVED"
        assert "Revised after review: Add a one-paragraph summary" in \
            entries["draft"][-1]["value"]
    if revisions:
        assert sorted(subs) == ["plan#1", "research#1.1", "research#1.2", "research#1.3",
                                "review#1", "review#2", "write#1", "write#2"]
        assert second is not None
        assert "Add a one-paragraph summary at the top." in second["description"]
    else:
        assert sorted(subs) == ["plan#1", "research#1.1", "research#1.2", "research#1.3",
                                "review#1", "write#1"]


async def test_the_supervisor_books_a_table_overruling_the_routers_mistake(
    settings: Settings,
) -> None:
    """Seed 001 on the demo model and a real worker: the plan lists telephone first and the
    router names it first; the engine runs maps instead, saying why, then the router's picks
    (calendar, telephone), then summarize; the state has the seed's fields."""
    async with demo_plane(settings) as (_srv, client):
        resp = await client.post("/api/v1/tasks", json={
            "description": "Find an Indian restaurant near Taipei 101 and reserve a "
                           "table for tomorrow at 7 PM", "workflow": "supervisor"})
        assert resp.status_code == 201, resp.text
        task_id = resp.json()["task_id"]

        detail = await wait_for_status(client, task_id, "completed", "failed")
        state = (await client.get(f"/api/v1/tasks/{task_id}/state")).json()
        events = await sse_events(client, task_id, until={"task_complete"})
        archive = (await client.get(f"/api/v1/tasks/{task_id}/download")).content
        log = (await client.get(f"/api/v1/tasks/{task_id}/messages")).json()
    assert detail["status"] == "completed", detail
    assert [(m["kind"], m["sender"], m["recipient"], m["entry"], m["revision"])
            for m in log["messages"]] == [
        ("request", "user", "planner", None, None), ("output", "planner", "router", "plan", 1),
        ("output", "router", "googlemap", "route", 1),
        ("output", "googlemap", "router", "googlemap", 1),
        ("output", "router", "calendar", "route", 2),
        ("output", "calendar", "router", "calendar", 1),
        ("output", "router", "telephone", "route", 3),
        ("output", "telephone", "summarizer", "telephone", 1)]
    as_events = [m["id"] for e in events if e["type"] == "message" for m in e["data"]["messages"]]
    assert as_events == [m["id"] for m in log["messages"]]  # the same hand-overs, as events
    view = state["state"]
    assert view["plan"]["agents"] == ["telephone", "googlemap", "calendar"]
    assert view["execution_order"] == ["googlemap", "calendar", "telephone"]
    assert "+886 2 8101 8846" in view["agent_outputs"]["googlemap"]
    assert view["summary"] == view["response"]
    assert "Done by: googlemap, calendar, telephone." in view["summary"]
    assert view["query"].startswith("Find an Indian restaurant")
    assert [m["role"] for m in view["messages"]] == [
        "user", "planner", "router", "googlemap", "router", "calendar", "router", "telephone",
        "summarizer"]
    decided = [e["data"] for e in events if e["type"] == "route_decision"]
    assert [(d["next"], d["by"]) for d in decided] == [
        ("googlemap", "fallback"), ("calendar", "router"), ("telephone", "router"),
        ("summarize", "engine")]
    assert decided[0]["asked"] == "telephone"
    assert decided[0]["reason"] == "'telephone' must wait for 'googlemap', 'calendar'"
    # The specialists used their MCP servers (started by the worker's agent loop): the
    # calendar's .ics file and the telephone's call record are the task's files.
    names = zipfile.ZipFile(io.BytesIO(archive)).namelist()
    assert sorted(n.split("/")[0] for n in names) == ["calendar", "calls", "summary.md"], names
    assert any(n.endswith("-dinner-at-saffron-46.ics") for n in names)
    assert "calls/1-886281018846.md" in names
    assert "Found Saffron 46" in view["agent_outputs"]["googlemap"]


async def test_a_user_adds_versions_of_a_workflow_only_they_see_and_tasks_keep_theirs(
    server: RunningServer, settings: Settings, client: httpx.AsyncClient
) -> None:
    """`POST /api/v1/workflows`: a user's own document, listed and run for them; a new
    version needs a higher `version`; a task keeps the version it started with; another user
    gets 404 (and cannot run it); a built-in's name is taken; `DELETE` removes it."""
    mine = REVIEW.replace("name: review", "name: mine").replace("version: 3", "version: 1")
    added = await client.post("/api/v1/workflows", json={"document": mine})
    assert added.status_code == 201, added.text
    assert (added.json()["name"], added.json()["version"], added.json()["yours"]) == (
        "mine", 1, True)
    listed = (await client.get("/api/v1/workflows")).json()["workflows"]
    assert [(w["name"], w["yours"]) for w in listed][-1] == ("mine", True)
    again = await client.post("/api/v1/workflows", json={"document": mine})
    assert (again.status_code, again.json()["error"]) == (409, "version_exists")
    taken = await client.post("/api/v1/workflows",
                              json={"document": mine.replace("name: mine", "name: pipeline")})
    assert (taken.status_code, taken.json()["error"]) == (409, "workflow_exists")
    async with echo_worker(server, settings):
        first = (await client.post("/api/v1/tasks", json={
            "description": "Cats", "workflow": "mine",
            "parameters": {"max_rounds": 0}})).json()["task_id"]
        newer = mine.replace("version: 1", "version: 2").replace("Polish: ", "Polish v2: ")
        assert (await client.post("/api/v1/workflows",
                                  json={"document": newer})).status_code == 201
        second = (await client.post("/api/v1/tasks", json={
            "description": "Cats", "workflow": "mine",
            "parameters": {"max_rounds": 0}})).json()["task_id"]
        done = [await wait_for_status(client, t, "completed", "failed") for t in (first, second)]
        other = await login(server, settings, name="bob")
        try:
            hidden = await other.get("/api/v1/workflows/mine")
            refused = await other.post("/api/v1/tasks", json={"description": "x",
                                                               "workflow": "mine"})
            theirs = [w["name"] for w in
                      (await other.get("/api/v1/workflows")).json()["workflows"]]
        finally:
            await other.aclose()
    polish = []
    for detail in done:
        assert detail["status"] == "completed", detail
        sub = next(s for s in detail["subtasks"] if s["key"] == "polish#1")
        polish.append((await client.get(f"/api/v1/subtasks/{sub['subtask_id']}")).json())
    assert polish[0]["description"].startswith("Polish: ")  # v1, pinned at submission
    assert polish[1]["description"].startswith("Polish v2: ")
    assert hidden.status_code == 404
    assert refused.status_code == 422
    assert "mine" not in theirs
    assert (await client.get("/api/v1/workflows/mine")).json()["version"] == 2
    assert (await client.delete("/api/v1/workflows/mine")).status_code == 204
    assert (await client.delete("/api/v1/workflows/mine")).status_code == 404
    assert (await client.delete("/api/v1/workflows/dag")).status_code == 409


@pytest.mark.parametrize(("document", "words"), [
    ("name: [unclosed", "not valid YAML"),
    (REVIEW.replace("kind: agent, role: editor", "kind: teleport, role: editor"), "steps.2.kind"),
    (REVIEW.replace('    max: "{max_rounds}"\n', ""), "loops.0.max"),
])
async def test_a_bad_document_is_a_422_naming_the_line(
    client: httpx.AsyncClient, document: str, words: str
) -> None:
    resp = await client.post("/api/v1/workflows", json={"document": document})
    assert resp.status_code == 422, resp.text
    detail = resp.json()["details"][0]
    assert detail["field"] == "document"
    assert words in detail["message"]
    assert detail["message"].startswith("document:")  # document:<line>: …
    assert (await client.get("/api/v1/workflows")).json()["workflows"][-1]["name"] == "review"


INTERVIEW = """\
name: interview
version: 1
description: Ask who it is for, draft, score, and let a gate decide.
roles:
  drafter: {prompt: "Draft on {query} for {audience}", tools: [echo]}
  scorer:
    prompt: '{"score": 5}'
    tools: [echo]
    output: {type: object, required: [score], properties: {score: {type: number}}}
  editor: {prompt: "Polish: {draft}", tools: [echo]}
steps:
  - {id: audience, kind: human, question: "Who is the proposal on {query} for?"}
  - {id: draft, kind: agent, role: drafter, after: [audience]}
  - {id: score, kind: agent, role: scorer, after: [draft]}
  - {id: quality, kind: gate, over: score.score, min_score: 7, after: [score]}
  - {id: polish, kind: agent, role: editor, after: [quality]}
"""


async def test_a_question_and_a_gate_wait_for_a_person(
    server: RunningServer, settings: Settings, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    """A `human` step's question is a checkpoint answered with `shoal answer` (approving it is
    a 409); the answer reaches the next prompt; a gate below its threshold waits for an
    approval; then the task completes."""
    added = await client.post("/api/v1/workflows", json={"document": INTERVIEW})
    assert added.status_code == 201, added.text
    shoal = cli(server, client, tmp_path)

    async def open_checkpoint(task_id: str) -> dict[str, Any]:
        await wait_for_status(client, task_id, "checkpoint_pending", "awaiting_input", "failed")
        page = (await client.get("/api/v1/checkpoints", params={
            "status": "pending_review", "task_id": task_id})).json()
        return dict(page["checkpoints"][0])

    async with echo_worker(server, settings):
        resp = await client.post("/api/v1/tasks", json={"description": "bike lanes",
                                                        "workflow": "interview"})
        assert resp.status_code == 201, resp.text
        task_id = resp.json()["task_id"]
        question = await open_checkpoint(task_id)
        assert question["reason"] == "question"
        assert question["question"] == "Who is the proposal on bike lanes for?"
        cid = question["checkpoint_id"]
        wrong = await client.post(f"/api/v1/checkpoints/{cid}/approve")
        assert (wrong.status_code, wrong.json()["error"]) == (409, "wrong_decision")
        shown = await asyncio.to_thread(shoal, "checkpoint", "show", cid)
        assert "Question: Who is the proposal on bike lanes for?" in shown.stdout
        assert f'shoal answer {cid} "your answer"' in shown.stdout
        said = await asyncio.to_thread(shoal, "answer", cid, "The city council")
        assert said.returncode == 0, said.stderr
        gate = await open_checkpoint(task_id)
        assert gate["reason"] == "gate"
        assert "'score.score' is 5, below 7" in gate["message"]
        approved = await client.post(f"/api/v1/checkpoints/{gate['checkpoint_id']}/approve")
        assert approved.status_code == 200, approved.text
        detail = await wait_for_status(client, task_id, "completed", "failed")
    assert detail["status"] == "completed", detail
    subs = {s["key"]: s for s in detail["subtasks"]}
    assert [subs[k]["kind"] for k in ("audience#1", "quality#1")] == ["human", "gate"]
    draft = (await client.get(f"/api/v1/subtasks/{subs['draft#1']['subtask_id']}")).json()
    assert draft["description"] == "Draft on bike lanes for The city council"
    answered = (await client.get(f"/api/v1/checkpoints/{cid}")).json()
    assert (answered["status"], answered["decision"], answered["notes"]) == (
        "answered", "answer", "The city council")
    state = (await client.get(f"/api/v1/tasks/{task_id}/state")).json()["entries"]
    assert state["audience"][0]["value"] == "The city council"


BUILD = """\
name: build
version: 1
description: Plan parts, build each after those it needs, sum up.
roles:
  planner:
    prompt: >-
      {"subtasks": [{"name": "Model", "description": "the model"},
      {"name": "API", "description": "the API", "dependencies": ["Model"]}]}
    tools: [echo]
  coder: {prompt: "Build {item}", tools: [echo]}
  writer: {prompt: "Sum up {parts}", tools: [echo]}
steps:
  - {id: parts, kind: expand, role: planner, each: coder}
  - {id: summary, kind: agent, role: writer, after: [parts]}
"""


async def test_an_expand_step_runs_its_plan_on_a_worker_in_dependency_order(
    server: RunningServer, settings: Settings, client: httpx.AsyncClient
) -> None:
    assert (await client.post("/api/v1/workflows", json={"document": BUILD})).status_code == 201
    async with echo_worker(server, settings):
        resp = await client.post("/api/v1/tasks", json={"description": "A shop",
                                                        "workflow": "build"})
        assert resp.status_code == 201, resp.text
        detail = await wait_for_status(client, resp.json()["task_id"], "completed", "failed")
    assert detail["status"] == "completed", detail
    subs = {s["key"]: s for s in detail["subtasks"]}
    assert sorted(subs) == ["parts#1", "parts#1.1", "parts#1.2", "summary#1"]
    assert subs["parts#1.2"]["name"] == "API"
    assert subs["parts#1.1"]["completed_at"] <= subs["parts#1.2"]["started_at"]
    summary = (await client.get(f"/api/v1/subtasks/{subs['summary#1']['subtask_id']}")).json()
    assert summary["description"].startswith('Sum up ["Build Model: the model"')


async def test_a_plan_of_ones_own_stands_for_the_planner_of_a_document(
    server: RunningServer, settings: Settings, client: httpx.AsyncClient
) -> None:
    assert (await client.post("/api/v1/workflows", json={"document": BUILD})).status_code == 201
    async with echo_worker(server, settings):
        resp = await client.post("/api/v1/tasks", json={
            "description": "A shop", "workflow": "build",
            "plan": [{"name": "Cart", "description": "the cart", "tool": "echo"}]})
        assert resp.status_code == 201, resp.text
        detail = await wait_for_status(client, resp.json()["task_id"], "completed", "failed")
    assert detail["status"] == "completed", detail
    assert sorted(s["key"] for s in detail["subtasks"]) == ["parts#1.1", "summary#1"]
    assert detail["subtasks"][0]["name"] == "Cart"
