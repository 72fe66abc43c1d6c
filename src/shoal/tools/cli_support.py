"""What the CLI adapters (Claude Code, Gemini CLI, Codex) share.

- `cli_prompt`: the prompt a CLI gets — the role, the absolute workspace, the instructions.
- `private_home`: a fresh HOME per run, outside the workspace, so a CLI's config, sessions and
  caches never mix between runs or end up in the results; removed afterwards.
- `cli_env`: the child's whole environment — only what it needs (PATH, locale, proxies) plus
  what the adapter adds; the worker's own secrets are not passed on.
- `find_cli` / `cli_version`: discovery of a CLI on PATH (plus `SHOAL_TOOL_PATH`).
- `JsonLines`: turns a CLI's JSONL output into dicts, passing other lines to the log.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from shoal.config import Settings
from shoal.errors import ToolError
from shoal.process import run_command
from shoal.tools.base import ToolRun

_PASSED_ON = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "HTTPS_PROXY", "HTTP_PROXY",
              "NO_PROXY", "https_proxy", "http_proxy", "no_proxy", "SSL_CERT_FILE",
              "NODE_EXTRA_CA_CERTS", "TMPDIR")


def cli_prompt(run: ToolRun) -> str:
    """The prompt for a CLI agent: who it is, where it works, what to do."""
    return (f"You are Shoal's {run.role} agent. Role: {run.role}.\n"
            f"Workspace: {run.workspace}\n"
            "Work only inside the workspace. When you are done, answer with a short summary "
            "of what you did.\n\n"
            f"{run.instructions}")


@contextlib.contextmanager
def private_home(prefix: str) -> Iterator[Path]:
    """A fresh, private HOME folder for one run; removed afterwards."""
    home = Path(tempfile.mkdtemp(prefix=f"shoal-{prefix}-"))
    try:
        yield home
    finally:
        shutil.rmtree(home, ignore_errors=True)


def cli_env(home: Path, extra: Mapping[str, str], settings: Settings | None = None
            ) -> dict[str, str]:
    """The child's whole environment: the basics, HOME, and `extra`."""
    env = {key: value for key in _PASSED_ON if (value := os.environ.get(key)) is not None}
    env["PATH"] = search_path(settings)
    env.setdefault("LANG", "C.UTF-8")
    env["HOME"] = str(home)
    env["TERM"] = "dumb"
    env["NO_COLOR"] = "1"
    env["CI"] = "1"
    env.update(extra)
    return env


def search_path(settings: Settings | None) -> str:
    """PATH with `settings.tool_path` in front."""
    base = os.environ.get("PATH", os.defpath)
    if settings is not None and settings.tool_path:
        return f"{settings.tool_path}{os.pathsep}{base}"
    return base


def find_cli(binary: str, settings: Settings | None) -> str | None:
    """The full path of `binary` (a name on PATH or a path), or None."""
    if os.sep in binary:
        path = Path(binary).expanduser()
        return str(path) if path.is_file() and os.access(path, os.X_OK) else None
    return shutil.which(binary, path=search_path(settings))


async def cli_version(path: str, settings: Settings | None = None) -> str | None:
    """The version a CLI prints for `--version` (the first x.y.z in it), or None."""
    with private_home("version") as home:
        try:
            result = await run_command([path, "--version"], cwd=home, timeout=20,
                                       env=cli_env(home, {}, settings))
        except ToolError:
            return None
    found = re.search(r"\d+\.\d+\.\d+[\w.+-]*", result.stdout + result.stderr)
    return found.group(0) if found and result.exit_code == 0 else None


class JsonLines:
    """Feeds the JSON objects of a JSONL stream to `on_event`; other lines go to `on_text`."""

    def __init__(self, on_event: Callable[[dict[str, Any]], None],
                 on_text: Callable[[str], None]) -> None:
        self._on_event = on_event
        self._on_text = on_text

    def __call__(self, line: str) -> None:
        stripped = line.strip()
        if not stripped:
            return
        if stripped.startswith("{"):
            try:
                value = json.loads(stripped)
            except ValueError:
                pass
            else:
                if isinstance(value, dict):
                    self._on_event(value)
                    return
        self._on_text(line)
