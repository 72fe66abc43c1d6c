"""Tool discovery: what a worker finds, why the rest is missing, and `shoal worker --check`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from shoal.demo.fake.server import running_fake_server
from shoal.demo.model import create_demo_model_app
from shoal.tools.registry import ADAPTERS, create_tools, probe_tools, tool_infos
from tests.conftest import CLI_DIR, make_settings, require_cli

SHOAL = str(Path(sys.executable).with_name("shoal"))


async def test_nothing_configured_offers_only_the_built_in_tools(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, tool_path=str(tmp_path / "empty"),
                             ollama_host="http://127.0.0.1:9", anthropic_api_key=None,
                             openai_api_key=None, gemini_api_key=None,
                             claude_binary="no-such-claude", gemini_binary="no-such-gemini",
                             codex_binary="no-such-codex")
    probes = await probe_tools(settings)
    assert [p.name for p in probes] == list(ADAPTERS)
    found = {p.name for p in probes if p.available}
    assert found == {"echo", "evaluator", "citations"}
    for probe in probes:
        if not probe.available:
            assert probe.detail, probe
            assert probe.enable, probe
    assert sorted(create_tools(settings, probes)) == ["citations", "echo", "evaluator"]


async def test_everything_configured_is_found_with_versions(tmp_path: Path) -> None:
    for binary in ("claude", "gemini", "codex"):
        require_cli(binary)
    async with running_fake_server(create_demo_model_app()) as root:
        settings = make_settings(
            tmp_path, tool_path=str(CLI_DIR), ollama_host=root, anthropic_api_key="k",
            openai_api_key="k", gemini_api_key="k", openai_compat_base_url=f"{root}/v1")
        probes = {p.name: p for p in await probe_tools(settings)}
        assert all(p.available for p in probes.values()), probes
        assert probes["claude_code"].version == "2.1.197"
        assert probes["gemini_cli"].version == "0.61.0"
        assert probes["codex"].version == "0.169.0"
        assert probes["ollama"].local  # on this machine: no data leaves it
        tools = create_tools(settings, list(probes.values()))
        infos = {i.name: i for i in tool_infos(tools)}
        assert infos["claude_code"].version == "2.1.197"
        assert not infos["anthropic"].local


def test_worker_check_prints_what_it_found_and_how_to_enable_the_rest(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("SHOAL_") and not k.endswith("_API_KEY")}
    env.update(SHOAL_DATA_DIR=str(tmp_path), SHOAL_TOOL_PATH=str(tmp_path),
               SHOAL_CLAUDE_BINARY="no-such-claude", SHOAL_GEMINI_BINARY="no-such-gemini",
               SHOAL_CODEX_BINARY="no-such-codex", OLLAMA_HOST="http://127.0.0.1:9",
               COLUMNS="200")
    done = subprocess.run([SHOAL, "worker", "--check"], env=env, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 1, done.stdout + done.stderr  # no AI tool at all
    out = done.stdout
    for name in ADAPTERS:
        assert name in out
    assert "ANTHROPIC_API_KEY" in out
    assert "ollama serve" in out
    assert "No AI tool found" in out
