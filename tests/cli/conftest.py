"""Fixtures of the command-line tests: a control plane to run commands against."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from shoal.api.server import running_server
from shoal.config import Settings
from shoal.demo.model import running_demo_model
from shoal.tools.agent_loop import OpenAICompatTool
from shoal.tools.citations import CitationsTool
from tests.cli.harness import LOW_SCORE_PLAN, Plane
from tests.runtime.harness import echo_worker, login


@pytest.fixture
async def plane(settings: Settings, tmp_path: Path) -> AsyncIterator[Plane]:
    """A control plane, a worker whose `openai_compat` tool is the demo model (beside Shoal's
    own `citations`), user alice."""
    async with running_demo_model() as model_url, running_server(settings) as srv:
        tool = OpenAICompatTool(base_url=model_url, api_key="sk-test", model="shoal-demo")
        async with echo_worker(srv, settings, tools={"openai_compat": tool,
                                                     "citations": CitationsTool(settings)}):
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
