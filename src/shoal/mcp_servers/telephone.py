"""`shoal mcp telephone`: record the call an agent would place. It dials nothing."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime

from mcp.server.mcpserver import MCPServer

from shoal.mcp_servers import workspace

server = MCPServer("telephone", instructions="Place a phone call. This telephone records the "
                   "call it would place and says so; it dials nothing.")


@server.tool()
def make_phone_call(phone: str, message: str, callee: str = "") -> str:
    """Call `phone` (e.g. "+886 2 8101 8846") to say `message` (e.g. a table for two tomorrow
    at 19:00). The call is recorded in calls/<n>-<number>.md, not dialled. Returns the record
    as JSON."""
    digits = re.sub(r"\D", "", phone)
    if not 5 <= len(digits) <= 15:
        return json.dumps({"error": f"{phone!r} is not a phone number (5 to 15 digits)"})
    folder = workspace() / "calls"
    folder.mkdir(parents=True, exist_ok=True)
    number = 1 + sum(1 for _ in folder.glob("*.md"))
    name = f"calls/{number}-{digits}.md"
    when = datetime.now(UTC).isoformat(timespec="seconds")
    (workspace() / name).write_text(
        f"# Call record\n\nNo call was placed: Shoal's telephone records the call it would "
        f"make, and dials nothing.\n\n- To: {callee or 'unnamed'} ({phone})\n- Recorded: "
        f"{when}\n\n## What would be said\n\n{message}\n", encoding="utf-8")
    return json.dumps({"recorded": name, "dialled": False, "to": phone, "callee": callee,
                       "message": message})
