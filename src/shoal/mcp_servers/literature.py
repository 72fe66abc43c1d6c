"""`shoal mcp literature`: search arXiv and Crossref for papers, and fetch one by DOI or arXiv id.

The services are asked through `shoal.retrieval.literature`, with the worker's settings
(`SHOAL_LITERATURE_*`: base URLs, a mailto for Crossref, the spacing between requests, retries).
Answers are cached under `<workspace>/.literature/`, so the attempt does not ask twice for the
same thing; that folder is the attempt's own working state, never part of the task's files.
Every tool answers JSON; a service that cannot be reached is an `error` saying which, and that
the step should go on without sources.
"""

from __future__ import annotations

import json
from typing import Literal

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

from shoal.config import Settings
from shoal.errors import InvalidInput, NotFound, Unavailable
from shoal.mcp_servers import workspace
from shoal.retrieval.literature import Literature, Service, literature_from_settings

server = MCPServer("literature", instructions=(
    "Find published papers. search_papers asks arXiv and Crossref and returns each paper once "
    "with its title, authors, year, venue, DOI or arXiv id, URL, abstract (arXiv's) and a "
    "citation_key: cite papers by that key and list them as references. get_paper fetches one "
    "paper by DOI or arXiv id. If a service cannot be reached, proceed without sources and "
    "say so."))

MAX_LIMIT = 50
_READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=True)
_client: Literature | None = None


def _literature() -> Literature:
    global _client
    if _client is None:  # made on first use, inside the server's event loop
        _client = literature_from_settings(Settings(_env_file=None, mode="dev"),
                                           workspace() / ".literature")
    return _client


def _unreachable(exc: Unavailable) -> str:
    return json.dumps({"error": exc.message, "service": (exc.details or {}).get("service"),
                       "proceed_without_sources": True}, ensure_ascii=False)


@server.tool(annotations=_READ_ONLY)
async def search_papers(query: str, limit: int = 10,
                        source: Literal["both", "arxiv", "crossref"] = "both") -> str:
    """Papers about `query` (plain words) from arXiv, Crossref or both (`source`), at most
    `limit` (1 to 50), each once: title, authors, year, venue, doi, arxiv_id, url, abstract
    and citation_key. `unavailable` names a service that could not be reached."""
    if not query.strip():
        return json.dumps({"error": "query is empty: say what the papers are about."})
    services = list(Service) if source == "both" else [Service(source)]
    papers, failed = await _literature().search(query, max(1, min(limit, MAX_LIMIT)), services)
    if failed and len(failed) == len(services):
        return json.dumps({
            "error": " ".join(failed.values()), "services": [str(s) for s in failed],
            "proceed_without_sources": True}, ensure_ascii=False)
    return json.dumps({"query": query, "papers": [p.as_json() for p in papers],
                       "unavailable": {str(s): why for s, why in failed.items()}},
                      ensure_ascii=False)


@server.tool(annotations=_READ_ONLY)
async def get_paper(id: str) -> str:
    """One paper by its DOI (`10.1000/xyz`, `doi:…` or a doi.org URL) or arXiv id
    (`1706.03762`, `arXiv:1706.03762v5` or an arxiv.org URL)."""
    try:
        paper = await _literature().paper(id)
    except Unavailable as exc:
        return _unreachable(exc)
    except (InvalidInput, NotFound) as exc:
        return json.dumps({"error": exc.message, "id": id}, ensure_ascii=False)
    return json.dumps({"paper": paper.as_json()}, ensure_ascii=False)
