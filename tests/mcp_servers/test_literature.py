"""`shoal mcp literature` over real stdio with the official `mcp` client, as a worker starts it,
against the fake arXiv and Crossref served on a real port (no spacing, no backoff but what
`Retry-After` asks)."""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from starlette.applications import Starlette

from shoal.demo.fake.literature import create_literature_app, requests_to, script_fault
from shoal.demo.fake.server import running_fake_server
from shoal.protocol import McpServer
from shoal.tools.mcp_config import launch

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def fake() -> Starlette:
    return create_literature_app()


@contextlib.asynccontextmanager
async def connected(workspace: Path, root: str) -> AsyncIterator[Client]:
    """A client of `shoal mcp literature` started as a worker starts it, the worker's settings
    pointing at the fake at `root`."""
    env = {"SHOAL_LITERATURE_ARXIV_URL": f"{root}/arxiv/api/query",
           "SHOAL_LITERATURE_CROSSREF_URL": f"{root}/crossref",
           "SHOAL_LITERATURE_INTERVAL": "0", "SHOAL_LITERATURE_RETRY_BASE": "0"}
    with pytest.MonkeyPatch.context() as patch:
        for key, value in env.items():
            patch.setenv(key, value)  # as the worker's own environment, handed on by `launch`
        how = launch(McpServer(name="literature", command="shoal", args=["mcp", "literature"]),
                     workspace)
    async with Client(StdioServerParameters(command=how.command, args=list(how.args),
                                            env=how.env, cwd=str(workspace)),
                      read_timeout_seconds=60) as client:
        yield client


async def call(client: Client, tool: str, **arguments: object) -> Any:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result
    return json.loads(getattr(result.content[0], "text", ""))


async def test_search_merges_both_services_and_keeps_each_paper_once(
        tmp_path: Path, fake: Starlette) -> None:
    """A paper on both (one DOI) and one under one title on each come back once, filled in."""
    async with running_fake_server(fake) as root, connected(tmp_path, root) as literature:
        found = await call(literature, "search_papers", query="turbine", limit=10)
    papers = found["papers"]
    assert [p["title"] for p in papers] == [
        "Tidal Energy Harvesting in Shallow Estuaries", "Estuary Sediment and Turbine Wear",
        "A Survey of Tidal Turbine Control"]
    assert (papers[0]["doi"], papers[0]["arxiv_id"], papers[0]["venue"]) == (
        "10.5555/tidal.2021.7", "2103.01234", "Journal of Ocean Energy")
    assert (papers[1]["doi"], papers[1]["arxiv_id"]) == ("10.5555/wear.2020.3", "1907.04567")
    assert papers[0]["citation_key"] == "okafor2021tidal"
    assert papers[0]["abstract"].startswith("We model tidal energy")
    assert found["unavailable"] == {}
    assert len(requests_to(fake, "arxiv")) == len(requests_to(fake, "crossref")) == 1


async def test_get_paper_by_doi_and_by_arxiv_id(tmp_path: Path, fake: Starlette) -> None:
    """A DOI is fetched from Crossref, an arXiv id from arXiv; an unknown one is an error."""
    async with running_fake_server(fake) as root, connected(tmp_path, root) as literature:
        by_doi = await call(literature, "get_paper", id="doi:10.5555/community.2022.1")
        by_arxiv = await call(literature, "get_paper", id="arXiv:1802.09999v1")
        unknown = await call(literature, "get_paper", id="10.5555/nothing")
    assert by_doi["paper"]["title"] == "Community Ownership of Tidal Energy Projects"
    assert by_doi["paper"]["authors"] == ["Priya Nair"]
    assert by_arxiv["paper"]["title"] == "A Survey of Tidal Turbine Control"
    assert "Crossref has no paper '10.5555/nothing'" in unknown["error"]


async def test_a_second_identical_call_is_answered_from_the_task_cache(
        tmp_path: Path, fake: Starlette) -> None:
    """Again in the same server, or in a new one on the same workspace (a retried step): the
    fake sees no further request."""
    async with running_fake_server(fake) as root:
        async with connected(tmp_path, root) as literature:
            first = await call(literature, "search_papers", query="tidal", source="arxiv")
            again = await call(literature, "search_papers", query="tidal", source="arxiv")
        async with connected(tmp_path, root) as literature:
            retried = await call(literature, "search_papers", query="tidal", source="arxiv")
    assert first == again == retried
    assert len(requests_to(fake, "arxiv")) == 1
    assert list((tmp_path / ".literature").glob("*.json"))


async def test_a_429_is_retried_after_its_retry_after(tmp_path: Path, fake: Starlette) -> None:
    """arXiv's 429 with `Retry-After: 1` is asked again no sooner than a second later."""
    script_fault(fake, "arxiv", 429, retry_after="1")
    async with running_fake_server(fake) as root, connected(tmp_path, root) as literature:
        found = await call(literature, "search_papers", query="tidal", source="arxiv")
    first, second = requests_to(fake, "arxiv")
    assert second.at - first.at >= 1.0
    assert len(found["papers"]) == 3


async def test_a_503_is_retried(tmp_path: Path, fake: Starlette) -> None:
    """Crossref's 503 is retried, and the paper comes back."""
    script_fault(fake, "crossref", 503, times=2)
    async with running_fake_server(fake) as root, connected(tmp_path, root) as literature:
        found = await call(literature, "get_paper", id="10.5555/tidal.2021.7")
    assert found["paper"]["doi"] == "10.5555/tidal.2021.7"
    assert len(requests_to(fake, "crossref")) == 3


async def test_one_service_down_leaves_the_other_s_papers(tmp_path: Path,
                                                          fake: Starlette) -> None:
    """Crossref failing every try: arXiv's papers come back, and `unavailable` says why."""
    script_fault(fake, "crossref", 503, times=10)
    async with running_fake_server(fake) as root, connected(tmp_path, root) as literature:
        found = await call(literature, "search_papers", query="tidal")
    assert len(found["papers"]) == 3
    assert "crossref" in found["unavailable"]
    assert "HTTP 503" in found["unavailable"]["crossref"]


async def test_without_network_the_error_names_the_service_and_says_go_on(
        tmp_path: Path) -> None:
    """A closed port: each tool answers an error naming the service it could not reach, and
    that the step should proceed without sources."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        root = f"http://127.0.0.1:{sock.getsockname()[1]}"
    async with connected(tmp_path, root) as literature:
        searched = await call(literature, "search_papers", query="tidal")
        fetched = await call(literature, "get_paper", id="2103.01234")
    assert searched["proceed_without_sources"] is True
    assert sorted(searched["services"]) == ["arxiv", "crossref"]
    assert "arXiv" in searched["error"]
    assert "Crossref" in searched["error"]
    assert "could not be reached" in searched["error"]
    assert (fetched["service"], fetched["proceed_without_sources"]) == ("arxiv", True)
    assert "Proceed without sources" in fetched["error"]
    assert not (tmp_path / ".literature").exists()
