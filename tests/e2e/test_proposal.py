"""The `proposal` workflow (seed 003) end to end: a real control plane, worker process and the
demo model through the fake model server (with its fake arXiv and Crossref for `shoal mcp
literature`). The interviewer asks; the test answers over REST, then the follow-up over the
client WebSocket; the problem formulator delegates the search to the literature reviewer, whose
papers the proposal cites; quality control sends the work back once; every stage's contract
holds; the message log lists every hand-over. The same through `shoal submit --follow`
answering on its standard input, and across a kill -9 of the control plane while it waits. And
answers the demo script has never seen (a correction, a budget and a permit): nothing known is
asked again, and the proposal states every fact told."""

from __future__ import annotations

import asyncio
import io
import json
import os
import sys
import zipfile
from collections import Counter
from collections.abc import Collection
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
from websockets.asyncio.client import connect

from shoal.demo.samples import SAMPLE_ANSWERS, SAMPLES
from shoal.workflows import BUILTIN
from tests.e2e.procs import (
    Cluster,
    Proc,
    access_token,
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

REQUEST = SAMPLES["proposal"]
FIRST, SECOND = SAMPLE_ANSWERS["proposal"]
CONTRACTS = {"interview": "interviewer", "problem": "problem_formulator",
             "objectives": "objectives_writer", "methodology": "methodologist",
             "data_plan": "data_planner", "quality": "quality_controller"}


async def _start(stack: Cluster) -> tuple[str, Proc, Proc, int]:
    port, model_port = free_port(), free_port()
    url = f"http://127.0.0.1:{port}"
    await stack.create_user("alice")
    await stack.create_user("bob")
    model = stack.start_demo_model(model_port)
    server = stack.start_server(port)
    token = await stack.create_worker_token("p1")
    await asyncio.gather(wait_healthy(url, server), wait_port(model_port, model))
    worker = stack.start_worker("p1", token, url, slots=2,
                                model_url=f"http://127.0.0.1:{model_port}/v1")
    return url, server, worker, port


async def _question(client: httpx.AsyncClient, task_id: str, procs: list[Proc],
                    after: Collection[str] = ()) -> dict[str, Any]:
    """The task's open question (a new one, not in `after`), once it waits for an answer."""
    detail = await wait_task(client, task_id, within=90, what="a question", procs=procs,
                             until=lambda d: d["status"] in ("awaiting_input", "failed",
                                                             "completed"))
    assert detail["status"] == "awaiting_input", detail
    page = (await client.get("/api/v1/checkpoints", params={
        "task_id": task_id, "status": "pending_review"})).json()
    [question] = [c for c in page["checkpoints"] if c["checkpoint_id"] not in after]
    assert question["reason"] == "question"
    return dict(question)


async def _answer(client: httpx.AsyncClient, question: dict[str, Any], text: str) -> None:
    answered = await client.post(f"/api/v1/checkpoints/{question['checkpoint_id']}/answer",
                                 json={"answer": text})
    assert answered.status_code == 200, answered.text


async def _finished(client: httpx.AsyncClient, task_id: str,
                    procs: list[Proc]) -> dict[str, Any]:
    return await wait_task(client, task_id, within=150, what="the proposal", procs=procs,
                           until=lambda d: d["status"] in ("completed", "failed"))


async def test_the_interviewer_asks_and_the_proposal_completes_with_every_contract(
    stack: Cluster,
) -> None:
    url, server, worker, _ = await _start(stack)
    procs = [server, worker]
    async with signed_in(url, "alice") as client, signed_in(url, "bob") as bob:
        await wait_workers_online(client, {"p1"}, procs)
        task_id = await submit(client, {"workflow": "proposal", "description": REQUEST})
        first = await _question(client, task_id, procs)
        assert "academic program" in first["question"]
        answer = f"/api/v1/checkpoints/{first['checkpoint_id']}/answer"
        # Another user's question is not theirs to see; empty and 100 kB answers are refused.
        assert (await bob.post(answer, json={"answer": "x"})).status_code == 404
        for bad in ("", "x" * 100_000):
            refused = await client.post(answer, json={"answer": bad})
            assert refused.status_code == 422, refused.text
            assert [d["field"] for d in refused.json()["details"]] == ["answer"]
        assert (await client.post(answer, json={"answer": FIRST})).status_code == 200
        again = await client.post(answer, json={"answer": FIRST})
        assert again.status_code == 409, again.text  # decided: the task no longer waits on it

        follow_up = await _question(client, task_id, procs, after={first["checkpoint_id"]})
        assert "How long" in follow_up["question"]
        token = client.headers["Authorization"].removeprefix("Bearer ")
        async with connect(url.replace("http://", "ws://") + f"/ws?token={token}") as ws:
            await ws.send(json.dumps({"type": "answer",
                                      "checkpoint_id": follow_up["checkpoint_id"],
                                      "answer": SECOND}))
            while True:
                frame = json.loads(await asyncio.wait_for(ws.recv(), timeout=30))
                if frame["type"] in ("answered", "error"):
                    break
        assert frame["type"] == "answered", frame

        detail = await _finished(client, task_id, procs)
        assert detail["status"] == "completed", detail
        assert detail["stage"] == "complete"
        download = await client.get(f"/api/v1/tasks/{task_id}/download")
        assert download.status_code == 200, download.text
        # what the user asked for, not the literature search's cached answers (`.literature/`)
        assert zipfile.ZipFile(io.BytesIO(download.content)).namelist() == ["proposal.md"]
        state = (await client.get(f"/api/v1/tasks/{task_id}/state")).json()
        report = (await client.get(f"/api/v1/tasks/{task_id}/report",
                                   headers={"Accept": "text/markdown"})).text
        log = (await client.get(f"/api/v1/tasks/{task_id}/messages")).json()
        page = (await client.get(f"/api/v1/tasks/{task_id}/messages",
                                 params={"limit": 3, "offset": 2})).json()
        hidden = await bob.get(f"/api/v1/tasks/{task_id}/messages")
        events = await sse_events(client, task_id, until={"task_complete"}, last_event_id=0)
        late = await client.post(answer, json={"answer": "too late"})
    assert late.status_code == 409
    assert hidden.status_code == 404
    entries = state["entries"]
    doc = BUILTIN["proposal"]
    for entry, role in CONTRACTS.items():  # all six contracts hold, on every revision
        schema = doc.roles[role].output
        assert schema is not None
        for revision in entries[entry]:
            jsonschema.validate(revision["value"], schema)
    profile = entries["interview"][-1]["value"]
    assert "Urban Planning" in profile["academic_program"]
    assert "6 months" in profile["total_timeline"]
    # One refinement: QC sent the work back once, with its recommendations in the prompt.
    assert [r["value"]["requires_refinement"] for r in entries["quality"]] == [True, False]
    assert len(entries["problem"]) == 2
    keys = Counter(s["key"].split("#")[0] for s in detail["subtasks"])
    assert keys["objectives"] == 2
    assert keys["proposal"] == 1
    stages = [e["data"]["stage"] for e in events if e["type"] == "stage"]
    assert stages == ["interviewing", "problem_formulation", "objectives", "methodology",
                      "data_collection", "quality_control", "refinement",
                      "problem_formulation", "objectives", "methodology", "data_collection",
                      "quality_control", "complete"]
    # The literature search ran as its own subtask of the literature reviewer, and every
    # paper the proposal cites is one it found.
    searches = [s for s in detail["subtasks"] if s["role"] == "literature_reviewer"]
    assert searches
    assert all(s["status"] == "completed" for s in searches)
    found = entries["problem"][-1]["value"]["preliminary_literature"]
    assert found
    for paper in found:
        assert f"[{paper['citation_key']}]" in report
        assert paper["url"]
        assert paper["url"] in report
    for heading in ("## Profile", "## Problem", "## Objectives", "## Methodology",
                    "## Data Collection", "## Timeline", "## References",
                    "## Quality Assessment"):
        assert heading in report
    # The message log: every hand-over, in order, paged; the same as the `message` events.
    said = [(m["kind"], m["sender"], m["recipient"]) for m in log["messages"]]
    assert said[:6] == [("request", "user", "interviewer"), ("question", "interviewer", "user"),
                        ("answer", "user", "interviewer"), ("question", "interviewer", "user"),
                        ("answer", "user", "interviewer"),
                        ("output", "interviewer", "problem_formulator")]
    assert ("delegation", "problem_formulator", "literature_reviewer") in said
    assert ("feedback", "quality_controller", "problem_formulator") in said
    assert said[-1] == ("output", "quality_controller", "writer")
    assert [m["content"] for m in log["messages"] if m["kind"] == "answer"] == [FIRST, SECOND]
    assert page["messages"] == log["messages"][2:5]
    assert (page["total"], page["limit"], page["offset"]) == (log["total"], 3, 2)
    streamed = [m["id"] for e in events if e["type"] == "message" for m in e["data"]["messages"]]
    assert streamed == [m["id"] for m in log["messages"]]


async def test_shoal_submit_follow_asks_on_its_standard_input(stack: Cluster) -> None:
    url, server, worker, _ = await _start(stack)
    async with signed_in(url, "alice") as client:
        await wait_workers_online(client, {"p1"}, [server, worker])
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("SHOAL_")},
               "SHOAL_URL": url, "SHOAL_TOKEN": await access_token(client, "alice"),
               "SHOAL_DATA_DIR": str(stack.root / "cli"), "NO_COLOR": "1", "COLUMNS": "200"}
        shoal = str(Path(sys.executable).with_name("shoal"))
        proc = await asyncio.create_subprocess_exec(
            shoal, "submit", "--workflow", "proposal", REQUEST, "--follow",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT, env=env)
        out, _ = await asyncio.wait_for(proc.communicate(f"{FIRST}\n{SECOND}\n".encode()),
                                        timeout=200)
        text = out.decode()
        assert proc.returncode == 0, text
        tasks = (await client.get("/api/v1/tasks", params={"workflow": "proposal"})).json()
        [task] = tasks["tasks"]
        state = (await client.get(f"/api/v1/tasks/{task['task_id']}/state")).json()
    assert task["status"] == "completed"
    assert "academic program" in text
    assert "Your answer" in text
    profile = state["entries"]["interview"][-1]["value"]
    assert "Urban Planning" in profile["academic_program"]
    assert "6 months" in profile["total_timeline"]


async def test_the_control_plane_killed_while_it_waits_for_an_answer(stack: Cluster) -> None:
    url, server, worker, port = await _start(stack)
    async with signed_in(url, "alice") as client:
        await wait_workers_online(client, {"p1"}, [server, worker])
        task_id = await submit(client, {"workflow": "proposal", "description": REQUEST})
        first = await _question(client, task_id, [server, worker])
        await server.kill()
        restarted = stack.start_server(port, name="server-restarted")
        await wait_healthy(url, restarted)
        procs = [restarted, worker]
        again = await _question(client, task_id, procs)
        assert again["checkpoint_id"] == first["checkpoint_id"]  # the same question, kept
        for text, question in ((FIRST, again), (SECOND, None)):
            question = question or await _question(client, task_id, procs,
                                                   after={first["checkpoint_id"]})
            await _answer(client, question, text)
        detail = await _finished(client, task_id, procs)
        assert detail["status"] == "completed", detail
        # No step ran twice: each run once, each with one successful attempt.
        keys = Counter(s["key"] for s in detail["subtasks"])
        assert all(n == 1 for n in keys.values()), keys
        for sub in detail["subtasks"]:
            if sub["kind"] != "agent":
                continue
            history = (await client.get(f"/api/v1/subtasks/{sub['subtask_id']}")).json()
            statuses = [h["status"] for h in history["attempt_history"]]
            assert statuses.count("succeeded") == 1, (sub["key"], statuses)
        humans = [s for s in detail["subtasks"] if s["kind"] == "human"]
        assert len(humans) == 2


async def test_the_students_answers_reach_the_proposal_and_nothing_known_is_asked_again(
    stack: Cluster,
) -> None:
    """Answers the demo script has never seen: a correction and a budget and a permit in one
    answer; the follow-up asks only for what is missing, and the proposal states every fact."""
    url, server, worker, _ = await _start(stack)
    procs = [server, worker]
    request = "Help me write a research proposal on microplastics in rivers. I have 6 months."
    async with signed_in(url, "alice") as client:
        await wait_workers_online(client, {"p1"}, procs)
        task_id = await submit(client, {"workflow": "proposal", "description": request})
        asked: list[str] = []
        for answer in ("I'm doing a Master's in Environmental Science; sorry, it's 3 years, "
                       "not 6 months.",
                       "I have a €5,000 budget and need a permit from the water authority to "
                       "sample."):
            question = await _question(client, task_id, procs, after=asked)
            asked.append(question["checkpoint_id"])
            assert "How long" not in question["question"], question  # the timeline was told
            await _answer(client, question, answer)
        detail = await _finished(client, task_id, procs)
        assert detail["status"] == "completed", detail
        state = (await client.get(f"/api/v1/tasks/{task_id}/state")).json()
        report = (await client.get(f"/api/v1/tasks/{task_id}/report",
                                   headers={"Accept": "text/markdown"})).text
    assert len(asked) == 2
    profile = state["entries"]["interview"][-1]["value"]
    assert profile["facts"]["known"]["total_timeline"] == {"value": "3 years", "from": 1}
    assert profile["field_of_study"] == "Environmental Science"
    for told in ("Master's in Environmental Science", "3 years", "€5,000 budget",
                 "need a permit from the water authority to sample"):
        assert told in report, told
    assert "6 months" not in report
