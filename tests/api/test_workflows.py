"""`/api/v1/workflows`: what a task may run, and the schema of workflow documents."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from shoal.api.server import RunningServer, running_server
from shoal.config import Settings
from shoal.workflows.document import DocStepKind
from tests.runtime.harness import login


@pytest.fixture
async def server(settings: Settings) -> AsyncIterator[RunningServer]:
    async with running_server(settings) as srv:
        yield srv


async def test_workflows_are_listed_and_shown_to_a_signed_in_user(
    server: RunningServer, settings: Settings
) -> None:
    async with httpx.AsyncClient(base_url=server.url) as anon:
        assert (await anon.get("/api/v1/workflows")).status_code == 401
        assert (await anon.get("/api/v1/workflows/schema")).status_code == 401
    client = await login(server, settings)
    try:
        listed = (await client.get("/api/v1/workflows")).json()["workflows"]
        assert "dag" in [w["name"] for w in listed]
        dag = await client.get("/api/v1/workflows/dag")
        assert dag.status_code == 200
        assert dag.json()["description"]
        missing = await client.get("/api/v1/workflows/nope")
        assert missing.status_code == 404
        assert missing.json()["error"] == "not_found"
        schema = (await client.get("/api/v1/workflows/schema")).json()
        assert set(schema["$defs"]["DocStepKind"]["enum"]) == {k.value for k in DocStepKind}
        assert {"name", "version", "roles", "steps"} <= set(schema["required"])
    finally:
        await client.aclose()
