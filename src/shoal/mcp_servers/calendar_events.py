"""`shoal mcp calendar`: add an event to the user's calendar as a real iCalendar (.ics) file."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta

from icalendar import Calendar, Event
from mcp.server.mcpserver import MCPServer

from shoal.mcp_servers import slug, workspace

server = MCPServer("calendar", instructions="Add events to the user's calendar; each is "
                   "written as an iCalendar file the user can import.")


@server.tool()
def add_calendar_event(title: str, start: str, duration_minutes: int = 90, location: str = "",
                       notes: str = "") -> str:
    """Add an event starting at `start` (ISO 8601, e.g. "2026-11-26T19:00", local time unless
    it names an offset) for `duration_minutes`, at `location`. Writes
    calendar/<date>-<title>.ics in the workspace and returns what was written, as JSON."""
    try:
        begins = datetime.fromisoformat(start)
    except ValueError:
        return json.dumps({"error": f"start {start!r} is not an ISO 8601 date and time, e.g. "
                                    "2026-11-26T19:00"})
    if not 1 <= duration_minutes <= 24 * 60:
        return json.dumps({"error": "duration_minutes must be 1 to 1440"})
    ends = begins + timedelta(minutes=duration_minutes)
    event = Event()
    uid = f"{uuid.uuid4()}@shoal"
    event.add("uid", uid)
    event.add("dtstamp", datetime.now(UTC))
    event.add("dtstart", begins)
    event.add("dtend", ends)
    event.add("summary", title)
    if location:
        event.add("location", location)
    if notes:
        event.add("description", notes)
    calendar = Calendar()
    calendar.add("prodid", "-//Shoal//calendar MCP server//EN")
    calendar.add("version", "2.0")
    calendar.add_component(event)
    name = f"calendar/{begins:%Y-%m-%d}-{slug(title)}.ics"
    target = workspace() / name
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(calendar.to_ical())
    return json.dumps({"file": name, "uid": uid, "title": title, "start": begins.isoformat(),
                       "end": ends.isoformat(), "location": location})
