"""The echo tool: echoes, waits, writes files, or fails on request."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

from shoal.tools.base import ToolRun
from shoal.tools.echo import EchoTool


def make_run(workspace: Path, options: dict[str, Any] | None = None,
             logs: list[str] | None = None) -> ToolRun:
    sink = logs if logs is not None else []
    return ToolRun(attempt_id=uuid.uuid4(), task_id=uuid.uuid4(), subtask_id=uuid.uuid4(),
                   role="coder", name="step", instructions="say hello", workspace=workspace,
                   timeout=30, log=sink.append, options=options or {})


async def test_echoes_the_instructions(tmp_path: Path) -> None:
    """The output is the instructions, and the run succeeds."""
    outcome = await EchoTool().run(make_run(tmp_path))
    assert outcome.status == "succeeded"
    assert outcome.output == "say hello"


async def test_writes_files_into_the_workspace(tmp_path: Path) -> None:
    """The `files` option is written into the workspace, folders included."""
    logs: list[str] = []
    files = {"a.txt": "A", "pkg/b.py": "print('b')\n"}
    outcome = await EchoTool().run(make_run(tmp_path, {"files": files}, logs))
    assert outcome.status == "succeeded"
    assert (tmp_path / "a.txt").read_text() == "A"
    assert (tmp_path / "pkg" / "b.py").read_text() == "print('b')\n"
    assert "write_file pkg/b.py (11 bytes)" in logs


async def test_unsafe_file_is_refused_and_nothing_written(tmp_path: Path) -> None:
    """A path that climbs out fails the run before any file is written."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    files = {"ok.txt": "fine", "../out.txt": "escaped"}
    outcome = await EchoTool().run(make_run(workspace, {"files": files}))
    assert outcome.status == "failed"
    assert outcome.error is not None
    assert "inside the workspace" in outcome.error
    assert not (tmp_path / "out.txt").exists()
    assert list(workspace.iterdir()) == []


async def test_fail_option_fails(tmp_path: Path) -> None:
    """With `fail` set the run ends as failed, saying it was on purpose."""
    outcome = await EchoTool().run(make_run(tmp_path, {"fail": True}))
    assert outcome.status == "failed"
    assert outcome.error is not None
    assert "on purpose" in outcome.error


async def test_delay_option_waits(tmp_path: Path) -> None:
    """With `delay` the run takes at least that long."""
    started = time.monotonic()
    await EchoTool().run(make_run(tmp_path, {"delay": 0.2}))
    assert time.monotonic() - started >= 0.2
