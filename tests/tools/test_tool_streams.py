"""Every agent passes the model's text on as it comes (`ToolRun.stream`, the live
`agent_token` events): the agent loop piece by piece, the CLIs message by message."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from shoal.tools.base import ToolRun
from tests.tools.test_mcp import TOOLS, make_tool

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("tool_name", TOOLS)
async def test_the_answer_streams_before_the_attempt_ends(
        root: str, tmp_path: Path, tool_name: str) -> None:
    streamed: list[str] = []
    workspace = tmp_path / "ws"
    workspace.mkdir()
    run = ToolRun(attempt_id=uuid.uuid4(), task_id=uuid.uuid4(), subtask_id=uuid.uuid4(),
                  role="coder", name="notes", workspace=workspace, timeout=90,
                  instructions="Write notes.md: three notes about city cats",
                  log=lambda _: None, stream=streamed.append)
    outcome = await make_tool(tool_name, tmp_path, root).run(run)
    assert outcome.status == "succeeded", outcome.error
    assert streamed, "nothing streamed"
    assert "".join(streamed).strip().endswith(outcome.output.strip()[-40:])
