"""`shoal mcp places`: search a bundled file of places by words and a landmark."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from mcp.server.mcpserver import MCPServer

server = MCPServer("places", instructions="Find restaurants and cafes near a landmark, with "
                   "their address, phone number, opening hours and rating.")


def _places() -> list[dict[str, Any]]:
    text = resources.files("shoal.mcp_servers").joinpath("places.json").read_text("utf-8")
    places: list[dict[str, Any]] = json.loads(text)
    return places


@server.tool()
def search_places(query: str, near: str = "", limit: int = 5) -> str:
    """Places whose name, category or cuisine match the words of `query` (e.g. "Indian
    restaurant"), near the landmark or district `near` (e.g. "Taipei 101"), best rated first.
    Returns a JSON list of places with name, address, phone, hours and rating."""
    words = [w for w in query.lower().split() if len(w) > 2]
    where = near.lower().strip()
    found = []
    for place in _places():
        text = " ".join([place["name"], place["category"], place["cuisine"]]).lower()
        if words and not all(w.rstrip("s") in text for w in words):
            continue
        if where and not any(where in n.lower() or n.lower() in where for n in place["near"]):
            continue
        found.append({k: place[k] for k in ("name", "address", "phone", "hours", "rating")})
    found.sort(key=lambda p: -p["rating"])
    return json.dumps(found[:max(1, min(limit, 20))], ensure_ascii=False)
