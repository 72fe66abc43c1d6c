"""Running the real `shoal` command in tests: a subprocess on a fresh data directory and
config directory (`start`, `finish`), and the commands of a signed-in user against an
in-process control plane (`Plane`, made by the `plane` fixture of `conftest.py`)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from shoal.api.server import RunningServer
from tests.runtime.harness import wait_for_status, wait_until

SHOAL = Path(sys.executable).with_name("shoal")
LOW_SCORE_PLAN = [{"name": "notes", "tool": "openai_compat",
                   "description": "Write notes.md: short notes. [demo:score=3]"}]


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
