"""The real `shoal` command, run as subprocesses, each against a fresh data directory.

Starting the command costs seconds, so the module's commands start together in one fixture
and each test checks one of them. The checkpoint commands run against an in-process control
plane with a worker on the demo model; the live view's rendering is checked on its own.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from rich.console import Console

from shoal.api.server import RunningServer, running_server
from shoal.cli.base import worker_settings
from shoal.cli.client import Credentials, ShoalClient
from shoal.cli.follow import Progress, follow
from shoal.config import DEV_SECRET, Settings
from shoal.demo.model import running_demo_model
from shoal.tools.agent_loop import OpenAICompatTool
from tests.runtime.harness import DEADLINE, echo_worker, login, wait_for_status, wait_until

SHOAL = Path(sys.executable).with_name("shoal")
USER_CREATE = ("user", "create", "--username", "u", "--password", "password123", "--admin")


@dataclass(frozen=True)
class Run:
    """A finished command."""

    returncode: int
    stdout: str
    stderr: str
    data_dir: Path


def start(base: Path, *args: str, **env: str) -> tuple[subprocess.Popen[str], Path]:
    """Start `shoal *args` in dev mode with fast hashing on a data directory under `base`."""
    base.mkdir(parents=True, exist_ok=True)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SHOAL_")}
    full = {
        **clean,
        "SHOAL_DATA_DIR": str(base / "data"),
        "XDG_CONFIG_HOME": str(base / "config"),
        "SHOAL_MODE": "dev",
        "SHOAL_BCRYPT_ROUNDS": "4",
        "NO_COLOR": "1",
        "COLUMNS": "200",
        **env,
    }
    proc = subprocess.Popen(
        [str(SHOAL), *args],
        env=full,
        cwd=base,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    return proc, base / "data"


def finish(started: tuple[subprocess.Popen[str], Path]) -> Run:
    """Wait for a command (at most a minute) and collect its output."""
    proc, data_dir = started
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    return Run(proc.returncode, out, err, data_dir)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    """Every command of this module, run concurrently where they are independent."""
    base = tmp_path_factory.mktemp("cli")
    started = {
        "token": start(base / "token", "token", "create", "--worker", "w1"),
        "user": start(base / "user", *USER_CREATE),
        "upgrade": start(base / "upgrade", "db", "upgrade"),
        "serve": start(base / "serve", "serve", "--port", "0", SHOAL_MODE="production"),
        "unreachable": start(base / "unreachable", "tasks", SHOAL_URL="http://127.0.0.1:9",
                             SHOAL_TOKEN="not-a-token"),
        "no_credentials": start(base / "no_credentials", "submit", "Build a thing"),
        "demo": start(base / "demo", "up", "--demo", "--port", "0"),
        "demo_supervisor": start(base / "demo_supervisor", "up", "--demo", "--port", "0",
                                 "--workflow", "supervisor"),
        "demo_nowhere": start(base / "demo_nowhere", "up", "--demo", "--workflow", "nowhere"),
    }
    done = {"user": finish(started.pop("user"))}
    again = start(base / "user", *USER_CREATE)
    done |= {name: finish(proc) for name, proc in started.items()}
    done["user_again"] = finish(again)
    return done


def test_token_create_prints_only_the_token(runs: dict[str, Run]) -> None:
    """`shoal token create` prints one line: the worker token."""
    result = runs["token"]
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("shw_")
    assert len(lines[0]) > 20


def test_user_create_succeeds(runs: dict[str, Run]) -> None:
    """`shoal user create --admin` creates the account and says so."""
    result = runs["user"]
    assert result.returncode == 0, result.stderr
    assert "Created user u" in result.stdout
    assert "as admin" in result.stdout


def test_duplicate_user_fails_clearly(runs: dict[str, Run]) -> None:
    """Creating a taken username exits 1 with a message that names it, not a traceback."""
    result = runs["user_again"]
    assert result.returncode == 1
    assert "'u'" in result.stderr
    assert "already taken" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_db_upgrade_succeeds(runs: dict[str, Run]) -> None:
    """`shoal db upgrade` migrates a fresh database and reports it."""
    result = runs["upgrade"]
    assert result.returncode == 0, result.stderr
    assert "newest schema" in result.stdout
    assert (result.data_dir / "shoal.db").exists()


def test_serve_refuses_production_without_secret(runs: dict[str, Run]) -> None:
    """`shoal serve` in production mode without SHOAL_SECRET_KEY exits 2 naming the variable."""
    result = runs["serve"]
    assert result.returncode == 2
    assert "SHOAL_SECRET_KEY" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_a_worker_needs_no_secret_key_in_production(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A worker signs and checks no tokens: production mode without SHOAL_SECRET_KEY is fine
    for it (a key of its own stands in), where `shoal serve` refuses to start."""
    monkeypatch.setenv("SHOAL_MODE", "production")
    monkeypatch.setenv("SHOAL_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("SHOAL_SECRET_KEY", raising=False)
    settings = worker_settings()
    assert settings.mode == "production"
    assert settings.secret_key != DEV_SECRET
    assert worker_settings().secret_key != settings.secret_key  # never a shared one


def test_unreachable_server_fails_clearly(runs: dict[str, Run]) -> None:
    """A client command against a server that is not there exits 1 and says what to do."""
    result = runs["unreachable"]
    assert result.returncode == 1
    assert "Cannot reach the control plane" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_submit_without_credentials_says_how_to_sign_in(runs: dict[str, Run]) -> None:
    """`shoal submit` with no session exits 1 and names the ways to get one."""
    result = runs["no_credentials"]
    assert result.returncode == 1
    assert "shoal up" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_up_demo_approves_checkpoints_and_ends(runs: dict[str, Run]) -> None:
    """`shoal up --demo` (what `make run` runs) approves its checkpoints itself and exits 0."""
    result = runs["demo"]
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "the demo approves it automatically" in result.stdout
    assert "shoal approve " in result.stdout
    assert "Task completed." in result.stdout


# ---- checkpoints, against a real control plane, worker and demo model ------------------------

LOW_SCORE_PLAN = [{"name": "notes", "tool": "openai_compat",
                   "description": "Write notes.md: short notes. [demo:score=3]"}]


@dataclass(frozen=True)
class Plane:
    """A running control plane with a worker on the demo model, and a signed-in user."""

    server: RunningServer
    http: httpx.AsyncClient
    env: dict[str, str]
    base: Path

    async def shoal(self, *args: str) -> Run:
        """Run the real `shoal ARGS` against this control plane as the signed-in user."""
        return await asyncio.to_thread(lambda: finish(start(self.base, *args, **self.env)))

    async def submit(self, plan: list[dict[str, Any]], **extra: Any) -> str:
        """Submit a task with its own plan; its id."""
        resp = await self.http.post("/api/v1/tasks", json={
            "description": "Checkpoint test", "plan": plan, **extra})
        assert resp.status_code == 201, resp.text
        return str(resp.json()["task_id"])

    async def pending_checkpoint(self, task_id: str) -> dict[str, Any]:
        """Wait for the task's checkpoint to open; the checkpoint."""

        async def opened() -> dict[str, Any] | None:
            page = (await self.http.get("/api/v1/checkpoints", params={
                "status": "pending_review", "task_id": task_id})).json()
            return page["checkpoints"][0] if page["checkpoints"] else None

        return await wait_until(opened, what=f"a checkpoint of task {task_id}")

    async def status(self, task_id: str, *statuses: str) -> dict[str, Any]:
        """Wait for the task to reach one of `statuses`; its detail."""
        return await wait_for_status(self.http, task_id, *statuses)


@pytest.fixture
async def plane(settings: Settings, tmp_path: Path) -> AsyncIterator[Plane]:
    """A control plane, a worker whose `openai_compat` tool is the demo model, user alice."""
    async with running_demo_model() as model_url, running_server(settings) as srv:
        tool = OpenAICompatTool(base_url=model_url, api_key="sk-test", model="shoal-demo")
        async with echo_worker(srv, settings, tools={"openai_compat": tool}):
            http = await login(srv, settings)
            env = {"SHOAL_URL": srv.url,
                   "SHOAL_TOKEN": http.headers["Authorization"].removeprefix("Bearer ")}
            try:
                yield Plane(srv, http, env, tmp_path / "cli")
            finally:
                await http.aclose()


@pytest.fixture
async def low_score(plane: Plane) -> tuple[str, str]:
    """A task waiting at the checkpoint its low score opened: (task id, checkpoint id)."""
    task_id = await plane.submit(LOW_SCORE_PLAN)
    checkpoint = await plane.pending_checkpoint(task_id)
    return task_id, checkpoint["checkpoint_id"]


async def test_checkpoints_lists_the_waiting_one(plane: Plane, low_score: tuple[str, str]
                                                 ) -> None:
    """`shoal checkpoints` lists a pending checkpoint with its id, reason, subtask and score."""
    result = await plane.shoal("checkpoints")
    assert result.returncode == 0, result.stderr
    assert low_score[1] in result.stdout
    assert "low_score" in result.stdout
    assert "notes" in result.stdout
    assert " 3 " in result.stdout


async def test_checkpoint_show_prints_reason_and_scores(plane: Plane,
                                                        low_score: tuple[str, str]) -> None:
    """`shoal checkpoint show` says why it opened, the scores per dimension and how to answer."""
    result = await plane.shoal("checkpoint", "show", low_score[1])
    assert result.returncode == 0, result.stderr
    assert "low evaluation score" in result.stdout
    assert "'notes' scored 3" in result.stdout
    assert re.search(r"completeness\s+│\s+3\b", result.stdout), result.stdout
    assert re.search(r"architecture\s+│\s+3\b", result.stdout), result.stdout
    assert f"shoal approve {low_score[1]}" in result.stdout


async def test_approve_resumes_the_task(plane: Plane, low_score: tuple[str, str]) -> None:
    """`shoal approve` accepts the work; the task completes and nothing waits any more."""
    task_id, checkpoint_id = low_score
    result = await plane.shoal("approve", checkpoint_id)
    assert result.returncode == 0, result.stderr
    assert "approved" in result.stdout
    await plane.status(task_id, "completed")
    assert "No checkpoint is waiting" in (await plane.shoal("checkpoints")).stdout


async def test_approving_a_decided_checkpoint_fails_clearly(plane: Plane,
                                                            low_score: tuple[str, str]) -> None:
    """Approving a checkpoint twice exits 1 with one line saying it was already decided."""
    checkpoint_id = low_score[1]
    assert (await plane.shoal("approve", checkpoint_id)).returncode == 0
    result = await plane.shoal("approve", checkpoint_id)
    assert result.returncode == 1
    assert f"Checkpoint {checkpoint_id} was already decided (approved)." in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


async def test_reject_cancels_the_task(plane: Plane, low_score: tuple[str, str]) -> None:
    """`shoal reject --reason` cancels the task, with the reason as its error."""
    task_id, checkpoint_id = low_score
    result = await plane.shoal("reject", checkpoint_id, "--reason", "Not what I asked for")
    assert result.returncode == 0, result.stderr
    assert "rejected" in result.stdout
    detail = await plane.status(task_id, "cancelled")
    assert "Not what I asked for" in detail["error"]


async def test_correct_sends_the_subtask_back(plane: Plane, low_score: tuple[str, str]) -> None:
    """`shoal correct --type bug --guidance` answers it and a correction subtask appears."""
    task_id, checkpoint_id = low_score
    result = await plane.shoal("correct", checkpoint_id, "--type", "bug", "--guidance",
                               "Add a heading to the notes.", "--reference", "notes.md")
    assert result.returncode == 0, result.stderr
    assert "corrected" in result.stdout
    shown = await plane.shoal("task", "show", task_id)
    assert "Fix: notes" in shown.stdout
    detail = await plane.shoal("checkpoint", "show", checkpoint_id)
    assert "Correction (bug): Add a heading to the notes." in detail.stdout


async def test_checkpoint_errors_name_the_problem(plane: Plane,
                                                  low_score: tuple[str, str]) -> None:
    """An unknown checkpoint and a malformed subtask id each exit 1 with one clear line."""
    unknown = await plane.shoal("approve", str(uuid.uuid4()))
    assert unknown.returncode == 1
    assert "No checkpoint" in unknown.stderr
    assert "shoal checkpoints" in unknown.stderr
    bad = await plane.shoal("correct", low_score[1], "--type", "bug", "--guidance", "x",
                            "--subtask", "not-an-id")
    assert bad.returncode == 1
    assert "Invalid --subtask" in bad.stderr
    assert "Traceback" not in unknown.stderr + bad.stderr


async def test_follow_hands_each_checkpoint_to_on_checkpoint(plane: Plane) -> None:
    """`follow(on_checkpoint=…)` gets each checkpoint; a handler's error is shown, not raised."""
    task_id = await plane.submit(LOW_SCORE_PLAN)
    seen: list[dict[str, Any]] = []

    async def approve_then_fail(data: dict[str, Any]) -> None:
        seen.append(data)
        await client.approve(data["checkpoint_id"])
        raise RuntimeError("handler broke after approving")

    out = io.StringIO()
    creds = Credentials(plane.server.url, plane.env["SHOAL_TOKEN"])
    async with ShoalClient(creds) as client:
        status = await asyncio.wait_for(
            follow(client, task_id, Console(file=out, width=200), on_checkpoint=approve_then_fail),
            DEADLINE)
    assert status == "completed"
    assert [d["reason"] for d in seen] == ["low_score"]
    assert "handler broke after approving" in out.getvalue()


# ---- the live view ---------------------------------------------------------------------------


def _event(event_type: str, /, **data: Any) -> dict[str, Any]:
    return {"type": event_type, "data": data, "seq": 1, "timestamp": "2025-01-01T00:00:00Z"}


def _screen(view: Progress) -> str:
    console = Console(file=io.StringIO(), width=200, no_color=True)
    console.print(view.render())
    return console.file.getvalue()  # type: ignore[attr-defined, no-any-return]


CHECKPOINT_ID = "11111111-2222-3333-4444-555555555555"


def test_follow_view_shows_a_checkpoint_until_it_is_decided() -> None:
    """`checkpoint_ready` shows why and how to answer; `checkpoint_decided` clears it."""
    view = Progress("t1")
    view.apply(_event("task_update", status="checkpoint_pending", progress=50))
    view.apply(_event("checkpoint_ready", checkpoint_id=CHECKPOINT_ID, reason="low_score",
                      status="pending_review", subtask_id="a",
                      message="'notes' scored 3 (below 7).", completed_count=0,
                      average_score=3.0, overall_score=3.0, deadline_at=None))
    screen = _screen(view)
    assert "waiting for you" in screen
    assert "'notes' scored 3 (below 7)." in screen
    assert "Score 3" in screen
    assert f"shoal approve {CHECKPOINT_ID}" in screen
    assert f'shoal reject {CHECKPOINT_ID} --reason "why"' in screen
    assert f"shoal correct {CHECKPOINT_ID} --type TYPE --guidance" in screen
    view.apply(_event("checkpoint_decided", checkpoint_id=CHECKPOINT_ID, decision="approve",
                      status="approved", reason=None))
    view.apply(_event("task_update", status="in_progress", progress=60))
    screen = _screen(view)
    assert CHECKPOINT_ID not in screen
    assert "waiting for you" not in screen


def test_follow_view_nests_quality_steps_and_shows_scores() -> None:
    """Quality steps sit indented under their subtask, whose row shows score and review."""
    view = Progress("t1")
    view.apply(_event("task_update", status="in_progress", progress=10, plan=[
        {"subtask_id": "a", "name": "Storage", "kind": "agent", "status": "queued"},
        {"subtask_id": "b", "name": "Docs", "kind": "agent", "status": "queued"}]))
    view.apply(_event("subtask_update", subtask_id="j", name="Judge: Storage", kind="judge",
                      target_id="a", status="completed"))
    view.apply(_event("evaluation", subtask_id="a", name="Storage", overall=8.7, scores={},
                      missing=[]))
    view.apply(_event("review", subtask_id="a", name="Storage", cycle=1, score=9.0,
                      decision="approved", outcome="approve", issues=0))
    lines = _screen(view).splitlines()
    storage = next(i for i, line in enumerate(lines) if "Storage" in line)
    assert "score 8.7 · review: approve" in lines[storage]
    assert "└ Judge" in lines[storage + 1]
    assert "Docs" in lines[storage + 2]


def test_follow_view_shows_the_models_words_as_they_stream() -> None:
    """`agent_token` events show the end of what the model is writing, on one line; the next
    log line takes its place."""
    view = Progress("t1")
    view.apply(_event("subtask_update", subtask_id="a", name="Notes", kind="agent",
                      status="in_progress"))
    for piece in ("Cats hunt ", "birds\nin ", "city parks"):
        view.apply({**_event("agent_token", subtask_id="a", text=piece), "seq": 0})
    assert "… Cats hunt birds in city parks" in _screen(view)
    view.apply(_event("agent_log", subtask_id="a", message="write_file notes.md (12 bytes)"))
    assert "write_file notes.md" in _screen(view)


async def test_submit_with_quality_off_skips_the_loop(plane: Plane, tmp_path: Path) -> None:
    """`shoal submit --quality off` runs a low-scoring plan straight to completion."""
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(LOW_SCORE_PLAN), encoding="utf-8")
    result = await plane.shoal("submit", "Notes", "--plan", str(plan), "--quality", "off",
                               "--follow")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "completed" in result.stdout
    bad = await plane.shoal("submit", "Notes", "--quality", "maybe")
    assert bad.returncode == 1
    assert "quality" in bad.stderr
    assert "Traceback" not in bad.stderr + bad.stdout


def test_up_demo_runs_another_workflows_sample(runs: dict[str, Run]) -> None:
    """`shoal up --demo --workflow supervisor` (`make run WORKFLOW=supervisor`) runs seed 001's
    restaurant booking to the end and shows its result; an unknown workflow is refused."""
    result = runs["demo_supervisor"]
    assert result.returncode == 0, result.stdout + result.stderr
    assert "(supervisor workflow)" in result.stdout
    assert "the router named 'telephone'; running 'googlemap'" in " ".join(result.stdout.split())
    assert "Done by: googlemap, calendar, telephone." in result.stdout
    assert "Task completed." in result.stdout
    refused = runs["demo_nowhere"]
    assert refused.returncode == 2
    assert "No sample for workflow 'nowhere'" in refused.stdout


NOTE = """\
name: note
version: 1
description: One note, which is the report.
roles:
  writer: {prompt: "Write a short note on {query}.", tools: [openai_compat]}
steps:
  - {id: write, kind: agent, role: writer, writes: report}
result: report
"""


async def test_what_a_user_owns_from_the_command_line(plane: Plane, tmp_path: Path) -> None:
    """`submit --source --budget-tokens`, then the report as Markdown and as a PDF, a share
    link, the account's export, and `task delete`."""
    assert (await plane.http.post("/api/v1/workflows", json={"document": NOTE})).status_code \
        == 201
    mine = tmp_path / "mine.md"
    mine.write_text("# Cats\n\nTwelve in Oslo.\n", encoding="utf-8")
    done = await plane.shoal("submit", "Cats", "--workflow", "note", "--source", str(mine),
                             "--budget-tokens", "1000000", "--follow")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Sources: mine.md (markdown)" in done.stdout
    page = (await plane.http.get("/api/v1/tasks", params={"limit": 1})).json()["tasks"][0]
    task_id = page["task_id"]
    detail = (await plane.http.get(f"/api/v1/tasks/{task_id}")).json()
    assert detail["sources"] == [{"name": "mine.md", "kind": "markdown", "size": 24}]
    assert detail["budget"] == {"tokens": 1000000}
    report = await plane.shoal("task", "report", task_id)
    assert report.returncode == 0, report.stderr
    assert report.stdout.strip()
    pdf = tmp_path / "report.pdf"
    saved = await plane.shoal("task", "report", task_id, "--pdf", str(pdf))
    assert saved.returncode == 0, saved.stderr
    assert pdf.read_bytes().startswith(b"%PDF")
    shared = await plane.shoal("task", "share", task_id)
    assert shared.stdout.strip().startswith(plane.server.url + "/s/shs_"), shared.stdout
    exported = tmp_path / "mine.zip"
    assert (await plane.shoal("export", str(exported))).returncode == 0
    assert exported.read_bytes().startswith(b"PK")
    deleted = await plane.shoal("task", "delete", task_id, "--yes")
    assert deleted.returncode == 0, deleted.stderr
    assert (await plane.http.get(f"/api/v1/tasks/{task_id}")).status_code == 404
    again = await plane.shoal("task", "delete", task_id, "--yes")
    assert again.returncode == 1
    assert "No task" in again.stderr
    assert "Traceback" not in again.stderr
