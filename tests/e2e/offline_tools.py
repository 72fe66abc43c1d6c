"""Every AI tool through a real Shoal subtask, offline, inside a loopback-only network namespace.

Run as `unshare -n python -m tests.e2e.offline_tools ROOT REPORT TOOL…` (what
`test_offline_tools.py` does). Inside the namespace it brings up loopback, then starts the
fake model server (`shoal demo-model`), a control plane and one worker offering the tools,
with `HTTPS_PROXY`/`HTTP_PROXY` pointing at a sentinel that records and refuses every attempt
to reach another host. It submits one task whose plan has a subtask per tool ("Write
hello_<tool>.py: …"), waits for it, and writes a JSON report: each subtask's status, files and
usage, the fake's request log and the sentinel's attempts. The test asserts on the report.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import CLI_DIR
from tests.e2e.procs import (
    cluster,
    finished,
    free_port,
    signed_in,
    submit,
    wait_healthy,
    wait_port,
    wait_task,
    wait_workers_online,
)
from tests.e2e.sentinel import running_sentinel

WITHIN = 240.0  # seconds for the whole task; each CLI takes a few seconds on two cores


def tool_env(fake: str, proxy: str, tools: list[str]) -> dict[str, str]:
    """The worker's environment: every vendor pointed at the fake, every proxy at the sentinel."""
    return {
        "SHOAL_TOOLS": json.dumps(tools),
        "SHOAL_TOOL_PATH": str(CLI_DIR),
        "ANTHROPIC_API_KEY": "sk-ant-fake",
        "ANTHROPIC_BASE_URL": fake,
        "OPENAI_API_KEY": "sk-fake",
        "SHOAL_OPENAI_BASE_URL": f"{fake}/v1",
        "SHOAL_OPENAI_MODEL": "gpt-fake",
        "SHOAL_CODEX_MODEL": "gpt-fake",
        "GEMINI_API_KEY": "fake-gemini-key",
        "SHOAL_GEMINI_BASE_URL": fake,
        "OLLAMA_HOST": fake,
        "SHOAL_OLLAMA_MODEL": "fake:latest",
        "SHOAL_OPENAI_COMPAT_BASE_URL": f"{fake}/v1",
        "SHOAL_MODEL_MAX_RETRIES": "0",
        "HTTPS_PROXY": proxy, "HTTP_PROXY": proxy, "https_proxy": proxy, "http_proxy": proxy,
        "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost",
    }


async def scenario(root: Path, tools: list[str]) -> dict[str, Any]:
    async with running_sentinel() as sentinel, cluster(root) as stack:
        model_port = free_port()
        model = stack.start_demo_model(model_port)
        await wait_port(model_port, model)
        fake = f"http://127.0.0.1:{model_port}"
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        await stack.create_user("alice")
        server = stack.start_server(port)
        token = await stack.create_worker_token("tools")
        await wait_healthy(url, server)
        data_dir = root / "worker-tools"
        worker = stack.start(
            "worker-tools",
            ["worker", "--server", url, "--token", token, "--name", "tools", "--slots", "3"],
            stack.env(data_dir, **tool_env(fake, sentinel.url, tools)), data_dir)
        procs = [model, server, worker]
        plan = [{"name": tool, "tool": tool,
                 "description": f"Write hello_{tool}.py: print a greeting from {tool}."}
                for tool in tools]
        async with signed_in(url, "alice") as client:
            await wait_workers_online(client, {"tools"}, procs)
            workers = (await client.get("/api/v1/workers")).json()["workers"]
            # The quality loop is proven elsewhere; here each tool's own run is under test.
            task_id = await submit(client, {"description": "Say hello with every tool",
                                            "plan": plan, "quality": "off"})
            detail = await wait_task(client, task_id, until=finished, within=WITHIN,
                                     what="the task to finish", procs=procs)
            subtasks = []
            for summary in detail["subtasks"]:
                sid = summary["subtask_id"]
                sub = (await client.get(f"/api/v1/subtasks/{sid}")).json()
                files = (await client.get(f"/api/v1/subtasks/{sid}/files")).json()["files"]
                subtasks.append({**sub, "files": files})
        async with httpx.AsyncClient(trust_env=False) as plain:
            fake_log = (await plain.get(f"{fake}/_fake/log")).json()
        return {"task": detail, "subtasks": subtasks, "workers": workers,
                "fake_log": fake_log, "outside_attempts": sentinel.attempts}


def main() -> None:
    root, report, *tools = sys.argv[1:]
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    result = asyncio.run(scenario(Path(root), tools))
    Path(report).write_text(json.dumps(result, indent=2, default=str), encoding="utf-8")


if __name__ == "__main__":
    main()
