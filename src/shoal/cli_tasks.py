"""`shoal task`: look at one task, and what of it is yours to keep or remove."""

from __future__ import annotations

import typer
from rich.table import Table

from shoal.cli_base import ServerOpt, TokenOpt, client_call, console

task_app = typer.Typer(help="Look at one task.", no_args_is_help=True)


@task_app.command("show")
def task_show(task_id: str, server: ServerOpt = None, token: TokenOpt = None) -> None:
    """A task with its subtasks."""
    t = client_call(lambda c: c.task(task_id), server, token)
    console.print(f"[bold]{t['task_id']}[/]  {t['status']}  {t['progress']}%")
    console.print(t["description"])
    if t.get("error"):
        console.print(f"[red]{t['error']}[/]")
    table = Table("subtask", "status", "worker", "tool", "attempts")
    for s in t["subtasks"]:
        table.add_row(s["name"], s["status"], s.get("assigned_worker") or "",
                      s.get("assigned_tool") or "", str(s["attempts"]))
    console.print(table)
