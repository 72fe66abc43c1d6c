"""`shoal submit --follow`: live progress of a task in the terminal."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from shoal.client import ShoalClient

STYLE = {"completed": "green", "failed": "red", "cancelled": "yellow", "in_progress": "cyan",
         "queued": "blue", "pending": "dim"}
ENDINGS = {"task_complete": "completed", "task_failed": "failed", "task_cancelled": "cancelled"}


class Progress:
    """What the terminal shows: one row per subtask, status, a bar and its last log line."""

    def __init__(self, task_id: str) -> None:
        self.task_id = task_id
        self.status = "pending"
        self.progress = 0
        self.rows: dict[str, dict[str, Any]] = {}
        self.notices: list[str] = []
        self.ending: str | None = None
        self.error: str | None = None

    def apply(self, event: dict[str, Any]) -> None:
        """Fold one event in."""
        kind, data = event["type"], event["data"]
        if kind == "task_update":
            self.status = data.get("status", self.status)
            self.progress = data.get("progress", self.progress)
            for sub in data.get("plan", []):
                self.rows.setdefault(sub["subtask_id"], {}).update(sub)
            if data.get("plan"):
                for row in self.rows.values():
                    if row.get("role") == "planner":
                        row["log"] = (f"planned {len(data['plan'])} subtasks "
                                      f"({data.get('plan_source', 'planner')})")
        elif kind == "subtask_update":
            self.rows.setdefault(data["subtask_id"], {}).update(data)
        elif kind == "agent_log" and data.get("subtask_id") and not self._is_planner(data):
            lines = [ln for ln in data["message"].splitlines() if ln.strip()] or [""]
            self.rows.setdefault(data["subtask_id"], {})["log"] = lines[-1].strip()[:120]
        elif kind == "notice":
            self.notices = [*self.notices[-4:], data.get("message", "")]
        elif kind in ENDINGS:
            self.ending = ENDINGS[kind]
            self.error = data.get("error") or data.get("reason")

    def _is_planner(self, data: dict[str, Any]) -> bool:
        return bool(self.rows.get(data["subtask_id"], {}).get("role") == "planner")

    def render(self) -> Group:
        """The current picture."""
        table = Table(expand=True, show_edge=False)
        table.add_column("subtask", ratio=3, overflow="ellipsis", no_wrap=True)
        table.add_column("status", min_width=11, no_wrap=True)
        table.add_column("progress", min_width=10, no_wrap=True)
        table.add_column("tool", min_width=6, overflow="ellipsis", no_wrap=True)
        table.add_column("last output", ratio=4, overflow="ellipsis", no_wrap=True)
        for row in self.rows.values():
            status = row.get("status", "pending")
            done = 100 if status == "completed" else int(row.get("progress") or 0)
            bar = "█" * (done // 10) + "░" * (10 - done // 10)
            table.add_row(row.get("name", "?"), Text(status, style=STYLE.get(status, "")), bar,
                          f"{row.get('assigned_tool') or ''}", row.get("log", ""))
        head = Text(f"Task {self.task_id}  {self.status}  {self.progress}%", style="bold")
        notes = [Text("! " + n, style="yellow") for n in self.notices]
        return Group(head, table, *notes)


async def follow(client: ShoalClient, task_id: str, console: Console) -> str:
    """Show live progress until the task ends; returns its final status. Reconnects on drops."""
    view = Progress(task_id)
    last = 0
    with Live(view.render(), console=console, refresh_per_second=8, transient=False) as live:
        while view.ending is None:
            try:
                async for event in client.events(task_id, since=last):
                    last = event["seq"]
                    view.apply(event)
                    live.update(view.render())
                    if view.ending:
                        break
            except (httpx.TransportError, httpx.RemoteProtocolError):
                console.print("[yellow]Connection lost; reconnecting…[/]")
                await asyncio.sleep(1.0)
    if view.error:
        console.print(f"[red]{view.error}[/]")
    return view.ending or "unknown"
