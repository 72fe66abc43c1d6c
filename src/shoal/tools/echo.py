"""The `echo` tool: answers with its instructions. For tests and benchmarks, never for work.

Options it reads from `ToolRun.options`: `delay` (seconds to wait first), `files`
(`{relative path: text}` to write into the workspace) and `fail` (end as failed).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from shoal.artifacts.paths import resolve_inside
from shoal.config import Settings
from shoal.errors import UnsafePath
from shoal.tools.base import Probe, ToolOutcome, ToolRun


class EchoTool:
    """A tool that needs no model: it echoes, optionally waits, writes files or fails."""

    name = "echo"
    local = True
    version = "1"

    async def run(self, run: ToolRun) -> ToolOutcome:
        """Wait `delay` seconds, write `files`, then echo the instructions (or fail)."""
        delay = float(run.options.get("delay", 0) or 0)
        if delay > 0:
            await asyncio.sleep(delay)
        files = run.options.get("files") or {}
        if not isinstance(files, Mapping):
            return ToolOutcome(status="failed", error="The echo tool's `files` option must be "
                               "an object of {relative path: text}.")
        try:
            written = await asyncio.to_thread(_write_files, run.workspace, files)
        except UnsafePath as exc:
            return ToolOutcome(status="failed", error=f"The echo tool refused a file: "
                               f"{exc.message} ({exc.details}). Use a path inside the workspace.")
        for path, size in written:
            run.log(f"write_file {path} ({size} bytes)")
        if run.options.get("fail"):
            return ToolOutcome(status="failed", output=run.instructions,
                               error="The echo tool failed on purpose (option `fail` is set).")
        run.log(f"echo: {len(run.instructions)} characters")
        return ToolOutcome(status="succeeded", output=run.instructions)


def _write_files(workspace: Path, files: Mapping[Any, Any]) -> list[tuple[str, int]]:
    """Check every path first, then write; so a bad name leaves the workspace untouched."""
    targets = [(str(path), resolve_inside(workspace, str(path)), str(text))
               for path, text in files.items()]
    written: list[tuple[str, int]] = []
    for path, target, text in targets:
        data = text.encode("utf-8")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        written.append((path, len(data)))
    return written


async def probe(settings: Settings) -> Probe:
    """The echo tool is always there."""
    return Probe("echo", True, version=EchoTool.version, local=True,
                 detail="built in (tests and benchmarks)")


def create(settings: Settings, probe: Probe) -> EchoTool:
    return EchoTool()
