"""Every AI tool runs a real Shoal subtask against the fake model server, with no network.

The scenario (`tests/e2e/offline_tools.py`) runs in its own network namespace that has only
loopback (`unshare -n`; needs root, as CI has): the real Claude Code, Gemini and Codex CLIs
(installed by `make clis`) and the official Ollama, Anthropic, OpenAI and Gemini SDKs each
write the file the fake asked for, usage is recorded, and no tool tried to reach any host but
the fake server.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import IN_CI, require_cli

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(420)]

ROOT = Path(__file__).resolve().parents[2]
CLI_TOOLS = {"claude_code": "claude", "gemini_cli": "gemini", "codex": "codex"}
API_TOOLS = ["ollama", "anthropic", "openai", "gemini", "openai_compat"]
# the protocol each tool must have spoken to the fake
EXPECTED_API = {
    "claude_code": "anthropic", "anthropic": "anthropic",
    "gemini_cli": "gemini", "gemini": "gemini",
    "codex": "openai_responses", "openai": "openai_chat", "openai_compat": "openai_chat",
    "ollama": "ollama_chat",
}


def _can_unshare() -> str | None:
    """None when `unshare -n` works here, else why not."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return "unshare or ip (util-linux, iproute2) is not installed"
    done = subprocess.run(["unshare", "-n", "true"], capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        return f"`unshare -n` is not allowed here ({done.stderr.strip()}); it needs root"
    return None


def _run_scenario(tmp_path: Path, tools: list[str]) -> dict[str, Any]:
    if (why := _can_unshare()) is not None:
        message = f"Cannot isolate the network: {why}. Run the tests as root (CI does)."
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    report = tmp_path / "report.json"
    done = subprocess.run(
        ["unshare", "-n", sys.executable, "-m", "tests.e2e.offline_tools",
         str(tmp_path / "run"), str(report), *tools],
        cwd=ROOT, capture_output=True, text=True, timeout=400, check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    print(done.stdout[-20_000:])
    print(done.stderr[-20_000:], file=sys.stderr)
    assert done.returncode == 0, "the scenario failed; its output is above"
    result: dict[str, Any] = json.loads(report.read_text(encoding="utf-8"))
    return result


def _check(result: dict[str, Any], tools: list[str]) -> None:
    assert result["outside_attempts"] == [], "a tool tried to reach another host"
    by_tool = {s["name"]: s for s in result["subtasks"]}
    for tool in tools:
        sub = by_tool[tool]
        assert sub["status"] == "completed", (tool, sub["error"], sub["attempt_history"])
        assert sub["assigned_tool"] == tool
        assert f"hello_{tool}.py" in [f["path"] for f in sub["files"]], (tool, sub["files"])
        usage = sub["attempt_history"][-1]["usage"]
        assert usage["input_tokens"] > 0, (tool, usage)
        assert usage["output_tokens"] > 0, (tool, usage)
    spoken = {entry["api"] for entry in result["fake_log"]}
    for tool in tools:
        assert EXPECTED_API[tool] in spoken, (tool, sorted(spoken))
    assert result["task"]["status"] == "completed"
    advertised = {t for w in result["workers"] for t in w["tools"]}
    assert set(tools) <= advertised


def test_cli_tools_offline(tmp_path: Path) -> None:
    """Claude Code, Gemini CLI and Codex each complete a subtask offline."""
    for binary in CLI_TOOLS.values():
        require_cli(binary)
    tools = list(CLI_TOOLS)
    _check(_run_scenario(tmp_path, tools), tools)


def test_api_tools_offline(tmp_path: Path) -> None:
    """Ollama and the Anthropic, OpenAI, Gemini and OpenAI-compatible APIs, offline."""
    _check(_run_scenario(tmp_path, API_TOOLS), API_TOOLS)
