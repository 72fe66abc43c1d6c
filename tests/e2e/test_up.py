"""`shoal up` as a person runs it: embedded server, login link, CLI submit, clean stop."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import stat
import subprocess
from pathlib import Path

import httpx
import pytest

from shoal.cli.credentials import CREDENTIALS_FILE
from tests.e2e.procs import CLI_SECONDS, SHOAL, cluster, free_port, wait_for, wait_healthy

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]
CHECKPOINT_ID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")
LINK = re.compile(r"(http://127\.0\.0\.1:\d+/login\?token=(shl_[\w-]+))")


def config_dir(env: dict[str, str]) -> Path:
    """Where the `shoal` commands of `env` keep their sessions."""
    return Path(env["XDG_CONFIG_HOME"]) / "shoal"


async def test_up_serves_submits_and_stops_on_sigterm(tmp_path: Path) -> None:
    """`shoal up` prints a working one-time link, runs a CLI task submitted from another
    folder, and exits on SIGTERM."""
    port = free_port()
    async with cluster(tmp_path) as group:
        data_dir = tmp_path / "up"
        env = group.env(data_dir)
        env.pop("SHOAL_SECRET_KEY")  # `shoal up` makes and keeps its own
        proc = group.start("up", ["up", "--port", str(port)], env, data_dir)
        url = f"http://127.0.0.1:{port}"
        await wait_healthy(url, proc)

        async def link() -> re.Match[str] | None:
            return LINK.search(proc.output())

        match = await wait_for(link, what="the login link", within=30, procs=[proc])
        assert match is not None
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            page = await client.get("/login", params={"token": match.group(2)})
            assert page.status_code == 200
            pair = await client.post("/api/v1/auth/exchange", json={"token": match.group(2)})
            assert pair.status_code == 200, pair.text
            again = await client.post("/api/v1/auth/exchange", json={"token": match.group(2)})
            assert again.status_code == 401  # one-time

        elsewhere = tmp_path / "elsewhere"  # a person's other terminal, in another folder
        elsewhere.mkdir()

        def shoal(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run([SHOAL, *args], env=env, cwd=elsewhere, capture_output=True,
                                  text=True, timeout=CLI_SECONDS, check=False)

        # A person follows the task in one terminal and answers its checkpoints in another.
        following = asyncio.create_task(asyncio.to_thread(
            shoal, "submit", "Build a CLI todo app with tests", "--follow"))
        approved: list[str] = []

        async def answered() -> bool:
            if following.done():
                return True
            listed = await asyncio.to_thread(shoal, "checkpoints")
            assert listed.returncode == 0, listed.stdout + listed.stderr
            for cid in set(CHECKPOINT_ID.findall(listed.stdout)) - set(approved):
                done = await asyncio.to_thread(shoal, "approve", cid)
                assert done.returncode == 0, done.stdout + done.stderr
                approved.append(cid)
            return False

        await wait_for(answered, what="the followed task to end", within=CLI_SECONDS,
                       procs=[proc])
        done = await following
        assert done.returncode == 0, done.stdout + done.stderr
        assert "completed" in done.stdout
        assert len(approved) == 2  # medium frequency on the four-step todo plan

        proc.popen.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(proc.popen.wait, 30)
        assert code == 0, proc.output()[-2000:]


async def test_a_submit_right_after_readyz_succeeds(tmp_path: Path) -> None:
    """`/readyz` under `shoal up` answers 200 only once its own worker has joined, so a script
    that waits for it (as a compose health check would) can submit at once."""
    port = free_port()
    async with cluster(tmp_path) as group:
        data_dir = tmp_path / "up"
        env = group.env(data_dir)
        env.pop("SHOAL_SECRET_KEY")
        proc = group.start("up", ["up", "--port", str(port)], env, data_dir)
        url = f"http://127.0.0.1:{port}"
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:

            async def ready() -> bool | None:
                try:
                    resp = await client.get("/readyz")
                except httpx.TransportError:
                    return None
                if resp.status_code == 503:
                    assert resp.json()["status"] == "not_ready"
                return resp.status_code == 200 or None

            await wait_for(ready, what="/readyz to answer 200", within=40, procs=[proc])
            path = config_dir(env) / CREDENTIALS_FILE  # owner-only, the default server
            assert stat.S_IMODE(path.stat().st_mode) == 0o600
            kept = json.loads(path.read_text())
            assert kept["default"] == url
            token = kept["servers"][url]["access_token"]
            resp = await client.post("/api/v1/tasks", json={"description": "Right after ready"},
                                     headers={"Authorization": f"Bearer {token}"})
            assert resp.status_code == 201, resp.text
