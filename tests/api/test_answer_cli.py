"""A workflow's question from the command line: `shoal submit --follow` asks it and sends the
line typed (the real command as a subprocess, its standard input a pipe), an empty input leaves
it for `shoal answer <task id>`, `--no-input` asks nothing; `shoal answer` takes a task's id as
well as a checkpoint's."""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import httpx
import pytest
from rich.console import Console

from shoal.api.server import RunningServer
from shoal.cli.client import Credentials, ShoalClient
from shoal.cli.follow import AskQuestions, follow
from shoal.worker.agent import Worker
from tests.api.test_ws_answer import ASKING
from tests.runtime.harness import DEADLINE, subtask_detail, wait_for_status, wait_until

SHOAL = str(Path(sys.executable).with_name("shoal"))
SUBMIT = ("submit", "--workflow", "asking", "bike lanes", "--follow")
QUESTION = "Question: Who is the proposal on bike lanes for?"


@pytest.fixture
async def env(server: RunningServer, client: httpx.AsyncClient, tmp_path: Path) -> dict[str, str]:
    """The environment of a `shoal` signed in to `server` as alice, who has added `asking`."""
    added = await client.post("/api/v1/workflows", json={"document": ASKING})
    assert added.status_code == 201, added.text
    return {**{k: v for k, v in os.environ.items() if not k.startswith("SHOAL_")},
            "SHOAL_URL": server.url, "NO_COLOR": "1", "COLUMNS": "200",
            "SHOAL_DATA_DIR": str(tmp_path / "cli"),
            "SHOAL_TOKEN": client.headers["Authorization"].removeprefix("Bearer ")}


async def shoal(env: dict[str, str], *args: str,
                stdin: str = "") -> subprocess.CompletedProcess[str]:
    """`shoal ARGS` to its end, with `stdin` as its standard input."""
    return await asyncio.to_thread(subprocess.run, [SHOAL, *args], input=stdin, env=env,
                                   capture_output=True, text=True, timeout=120)


@contextlib.contextmanager
def started(env: dict[str, str], *args: str, stdin: int) -> Iterator[subprocess.Popen[str]]:
    """`shoal ARGS` running, its output read as it comes; killed if still running at the end."""
    proc = subprocess.Popen([SHOAL, *args], env=env, text=True, stdin=stdin,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()


async def read_until(out: IO[str], pattern: str) -> tuple[re.Match[str], str]:
    """Read the output up to the first line matching `pattern`: the match, and all read."""
    seen = ""
    async with asyncio.timeout(DEADLINE):
        while True:
            line = await asyncio.to_thread(out.readline)
            assert line, f"the command ended before {pattern!r}:\n{seen}"
            seen += line
            if found := re.search(pattern, line):
                return found, seen


def task_of(stdout: str) -> str:
    """The id of the task `shoal submit` says it created."""
    found = re.search(r"^Task ([0-9a-f-]{36}) ", stdout, re.MULTILINE)
    assert found, stdout
    return found.group(1)


async def draft_prompt(client: httpx.AsyncClient, task_id: str) -> str:
    """The prompt of the completed task's `draft` step."""
    detail = await wait_for_status(client, task_id, "completed", "failed", "cancelled")
    assert detail["status"] == "completed", detail
    subs = {s["key"]: s for s in detail["subtasks"]}
    return str((await subtask_detail(client, subs["draft#1"]["subtask_id"]))["description"])


async def test_submit_follow_asks_the_question_and_sends_the_line_typed(
    env: dict[str, str], client: httpx.AsyncClient, worker: Worker
) -> None:
    """The question is asked once; a 30,000-character line is refused naming why and asked
    again; the next line is the answer, and the follow ends with the task complete."""
    done = await shoal(env, *SUBMIT, stdin="x" * 30_000 + "\nThe city council\n")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count(QUESTION) == 1, done.stdout
    assert done.stdout.count("Your answer: ") == 2, done.stdout
    assert "Not taken: answer: String should have at most 20000 characters" in done.stdout
    assert "answered: Answered. The task goes on." in done.stdout
    task_id = task_of(done.stdout)
    assert await draft_prompt(client, task_id) == "Draft on bike lanes for The city council"

    again = await shoal(env, "answer", task_id, "The mayor")
    assert again.returncode == 1
    assert f"Task {task_id} has no open question (it is completed)." in again.stderr
    unknown = await shoal(env, "answer", str(uuid.uuid4()), "The mayor")
    assert unknown.returncode == 1
    assert "No checkpoint or task" in unknown.stderr
    assert "Traceback" not in again.stderr + unknown.stderr


async def test_an_empty_input_leaves_the_question_to_shoal_answer_with_the_task_id(
    env: dict[str, str], client: httpx.AsyncClient, worker: Worker
) -> None:
    """At the end of its input the follow says how to answer later and goes on following;
    `shoal answer <task id>` answers the task's question, and the follow ends with it."""
    with started(env, *SUBMIT, stdin=subprocess.DEVNULL) as proc:
        assert proc.stdout is not None
        found, seen = await read_until(proc.stdout, r'Answer it later with: shoal answer (\S+) "')
        assert QUESTION in seen
        task_id = found.group(1)
        said = await shoal(env, "answer", task_id, "The mayor")
        assert said.returncode == 0, said.stderr
        assert "answered" in said.stdout
        out, err = await asyncio.to_thread(proc.communicate, timeout=60)
    assert proc.returncode == 0, seen + out + err
    assert "Your answer: " not in out  # asked once only
    assert await draft_prompt(client, task_id) == "Draft on bike lanes for The mayor"


async def test_no_input_asks_nothing(
    env: dict[str, str], client: httpx.AsyncClient, worker: Worker
) -> None:
    """With `--no-input` the line waiting on standard input is never read: the question is
    answered by its checkpoint's id, and the follow ends with that answer."""
    with started(env, *SUBMIT, "--no-input", stdin=subprocess.PIPE) as proc:
        assert proc.stdin is not None
        assert proc.stdout is not None
        proc.stdin.write("Not me\n")
        proc.stdin.flush()
        found, seen = await read_until(proc.stdout, r"^Task ([0-9a-f-]{36}) ")
        task_id = found.group(1)
        await wait_for_status(client, task_id, "awaiting_input")
        page = (await client.get("/api/v1/checkpoints", params={
            "status": "pending_review", "task_id": task_id})).json()
        [checkpoint] = page["checkpoints"]
        said = await shoal(env, "answer", checkpoint["checkpoint_id"], "The press")
        assert said.returncode == 0, said.stderr
        out, err = await asyncio.to_thread(proc.communicate, timeout=60)
    assert proc.returncode == 0, seen + out + err
    assert "Your answer" not in seen + out
    assert await draft_prompt(client, task_id) == "Draft on bike lanes for The press"


TWICE = """\
name: twice
version: 1
description: Ask who the proposal is for and in what tone, then draft it.
roles:
  drafter: {prompt: "Draft on {query} for {audience}, {tone}", tools: [echo]}
steps:
  - {id: audience, kind: human, question: "Who is the proposal on {query} for?"}
  - {id: tone, kind: human, question: "In what tone?", after: [audience]}
  - {id: draft, kind: agent, role: drafter, after: [tone]}
"""


async def test_a_follow_asks_only_the_questions_still_open_once_each(
    server: RunningServer, client: httpx.AsyncClient, worker: Worker
) -> None:
    """A follow that starts after the first question was answered replays it without asking
    it; the open one is asked once (it is replayed too, then decided)."""
    assert (await client.post("/api/v1/workflows", json={"document": TWICE})).status_code == 201
    resp = await client.post("/api/v1/tasks", json={"description": "bike lanes",
                                                    "workflow": "twice"})
    task_id = resp.json()["task_id"]

    async def open_question(text: str) -> str:
        async def found() -> str | None:
            page = (await client.get("/api/v1/checkpoints", params={
                "status": "pending_review", "task_id": task_id})).json()
            return next((cp["checkpoint_id"] for cp in page["checkpoints"]
                         if cp["question"] == text), None)
        return await wait_until(found, what=f"the question {text!r}")

    first = await open_question("Who is the proposal on bike lanes for?")
    said = await client.post(f"/api/v1/checkpoints/{first}/answer", json={"answer": "Cyclists"})
    assert said.status_code == 200, said.text
    await open_question("In what tone?")
    lines, asked = ["formal\n"], []

    async def typed() -> str:
        asked.append(len(lines))
        return lines.pop(0) if lines else ""

    out = io.StringIO()
    console = Console(file=out, width=200, no_color=True)
    creds = Credentials(server.url, client.headers["Authorization"].removeprefix("Bearer "))
    async with ShoalClient(creds) as shoal_client:
        ask = AskQuestions(shoal_client, console, task_id, read=typed, echo=True)
        status = await asyncio.wait_for(follow(shoal_client, task_id, console, on_checkpoint=ask),
                                        DEADLINE)
    assert status == "completed", out.getvalue()
    assert asked == [1], out.getvalue()
    assert "Question: Who is the proposal" not in out.getvalue()
    assert out.getvalue().count("Question: In what tone?") == 1
    assert "Your answer: formal" in out.getvalue()
    assert await draft_prompt(client, task_id) == "Draft on bike lanes for Cyclists, formal"
