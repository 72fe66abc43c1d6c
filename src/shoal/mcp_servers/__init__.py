"""The MCP servers Shoal ships for its built-in workflows (the `supervisor`'s specialists).

Each runs over stdio as `shoal mcp NAME` and works in the folder named by `SHOAL_WORKSPACE`
(the attempt's workspace, which the worker sets), else the current one:

- `places`: searches a bundled file of places (restaurants, cafes) by words and a landmark;
- `calendar`: adds an event as a real iCalendar file, `calendar/<date>-<title>.ics`;
- `telephone`: records the call it would place in `calls/<n>-<number>.md`, and says so: it dials
  nothing;
- `sources`: searches the task's sources (`sources/`) for cited passages and answers read-only
  SQL over its data files (`shoal.retrieval`);
- `literature`: searches arXiv and Crossref for papers (cached under `.literature/`).
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

NAMES = ("places", "calendar", "telephone", "sources", "literature")


def workspace() -> Path:
    """Where a server writes: the attempt's workspace."""
    return Path(os.environ.get("SHOAL_WORKSPACE") or os.getcwd()).resolve()


def slug(text: str, size: int = 40) -> str:
    """A file-name-safe form of `text` (never empty, never a path)."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:size] or "item"


def serve(name: str) -> None:
    """Run the server `name` over stdio until its client hangs up."""
    if name == "places":
        from shoal.mcp_servers.places import server
    elif name == "calendar":
        from shoal.mcp_servers.calendar_events import server
    elif name == "telephone":
        from shoal.mcp_servers.telephone import server
    elif name == "sources":
        from shoal.mcp_servers.sources import server
    elif name == "literature":
        from shoal.mcp_servers.literature import server
    else:
        raise ValueError(f"No bundled MCP server '{name}'; choose one of {', '.join(NAMES)}.")
    # Its stderr is the agent's console: a line per HTTP request (httpx's INFO) is noise there.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    server.run("stdio")
