"""`shoal task`: look at one task, and what of it is yours to keep or remove."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from shoal.cli_base import ServerOpt, TokenOpt, client_call, console, err

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


@task_app.command("delete")
def task_delete(task_id: str, yes: Annotated[bool, typer.Option(
        "--yes", help="Do not ask first.")] = False,
                server: ServerOpt = None, token: TokenOpt = None) -> None:
    """Delete an ended task with everything of it (its files, events, share links)."""
    if not yes and not typer.confirm(f"Delete task {task_id} and everything of it?"):
        raise typer.Exit(1)
    client_call(lambda c: c.request("DELETE", f"/api/v1/tasks/{task_id}"), server, token)
    console.print(f"Task {task_id} deleted.")


@task_app.command("report")
def task_report(
    task_id: str,
    pdf: Annotated[Path | None, typer.Option(help="Save the report as a PDF here.")] = None,
    server: ServerOpt = None, token: TokenOpt = None,
) -> None:
    """Print a task's report (Markdown), or save it as a PDF."""
    if pdf is not None:
        size = client_call(lambda c: c.download(f"/api/v1/tasks/{task_id}/report.pdf", pdf),
                           server, token)
        console.print(f"Saved {pdf} ({size} bytes).")
        return
    text = client_call(lambda c: c.request("GET", f"/api/v1/tasks/{task_id}/report"),
                       server, token)
    print(text.decode() if isinstance(text, bytes) else text)


@task_app.command("share")
def task_share(task_id: str, server: ServerOpt = None, token: TokenOpt = None) -> None:
    """A public, read-only link to the task's report (shown once; revoke it with unshare)."""
    made = client_call(lambda c: c.request("POST", f"/api/v1/tasks/{task_id}/shares"),
                       server, token)
    console.print(made["url"], highlight=False, soft_wrap=True)
    err.print(f"Share {made['share_id']}: anyone with the link can read the report. "
              f"Revoke it with: shoal task unshare {task_id} {made['share_id']}")


@task_app.command("unshare")
def task_unshare(task_id: str, share_id: str, server: ServerOpt = None,
                 token: TokenOpt = None) -> None:
    """Revoke a share link: it opens nothing from now on."""
    client_call(lambda c: c.request("DELETE", f"/api/v1/tasks/{task_id}/shares/{share_id}"),
                server, token)
    console.print("Revoked.")


def export_account(
    dest: Annotated[Path, typer.Argument(help="Where to save the zip.")] = Path("shoal.zip"),
    server: ServerOpt = None, token: TokenOpt = None,
) -> None:
    """Everything of yours (account, tasks with their events and files, uploads) as a zip."""
    size = client_call(lambda c: c.download("/api/v1/export", dest), server, token)
    console.print(f"Saved {dest} ({size} bytes).")

