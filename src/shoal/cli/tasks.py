"""`shoal submit`, `shoal tasks`, `shoal cancel` and `shoal task`: your tasks, and what of
them is yours to keep or remove."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from shoal.cli import ids, refusals
from shoal.cli.base import (
    ServerOpt,
    T,
    TaskArg,
    TokenOpt,
    client_call,
    console,
    err,
    settings_from_env,
)
from shoal.cli.client import ApiError, ShoalClient

task_app = typer.Typer(help="Look at one task.", no_args_is_help=True)


def on_task(given: str, fn: Callable[[ShoalClient, str], Awaitable[T]], server: str | None,
            token: str | None) -> T:
    """`fn(client, the task's whole id)` for the task `given` names (an id or its start)."""

    async def go(client: ShoalClient) -> T:
        return await fn(client, await ids.task_id(client, given))

    return client_call(go, server, token)


@task_app.command("show")
def task_show(task_id: TaskArg, server: ServerOpt = None, token: TokenOpt = None) -> None:
    """A task with its subtasks."""
    t = on_task(task_id, lambda c, tid: c.task(tid), server, token)
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
def task_delete(task_id: TaskArg, yes: Annotated[bool, typer.Option(
        "--yes", help="Do not ask first.")] = False,
                server: ServerOpt = None, token: TokenOpt = None) -> None:
    """Delete an ended task with everything of it (its files, events, share links)."""
    whole = client_call(lambda c: ids.task_id(c, task_id), server, token)
    if not yes and not typer.confirm(f"Delete task {whole} and everything of it?"):
        raise typer.Exit(1)

    async def delete(client: ShoalClient) -> None:
        try:
            await client.request("DELETE", f"/api/v1/tasks/{whole}")
        except ApiError as exc:
            raise refusals.not_ended(exc, whole) from exc

    client_call(delete, server, token)
    console.print(f"Task {whole} deleted.")


@task_app.command("report")
def task_report(
    task_id: TaskArg,
    pdf: Annotated[Path | None, typer.Option(help="Save the report as a PDF here.")] = None,
    server: ServerOpt = None, token: TokenOpt = None,
) -> None:
    """Print a task's report (Markdown), or save it as a PDF."""
    if pdf is not None:
        size = on_task(task_id, lambda c, tid: c.download(f"/api/v1/tasks/{tid}/report.pdf",
                                                          pdf), server, token)
        console.print(f"Saved {pdf} ({size} bytes).")
        return
    text = on_task(task_id, lambda c, tid: c.request("GET", f"/api/v1/tasks/{tid}/report"),
                   server, token)
    print(text.decode() if isinstance(text, bytes) else text)


@task_app.command("share")
def task_share(task_id: TaskArg, server: ServerOpt = None, token: TokenOpt = None) -> None:
    """A public, read-only link to the task's report (shown once; revoke it with unshare)."""
    made = on_task(task_id, lambda c, tid: c.request("POST", f"/api/v1/tasks/{tid}/shares"),
                   server, token)
    console.print(made["url"], highlight=False, soft_wrap=True)
    err.print(f"Share {made['share_id']}: anyone with the link can read the report. "
              f"Revoke it with: shoal task unshare {made['task_id']} {made['share_id']}")


@task_app.command("unshare")
def task_unshare(task_id: TaskArg, share_id: str, server: ServerOpt = None,
                 token: TokenOpt = None) -> None:
    """Revoke a share link: it opens nothing from now on."""
    on_task(task_id, lambda c, tid: c.request(
        "DELETE", f"/api/v1/tasks/{tid}/shares/{share_id}"), server, token)
    console.print("Revoked.")


def export_account(
    dest: Annotated[Path, typer.Argument(help="Where to save the zip.")] = Path("shoal.zip"),
    server: ServerOpt = None, token: TokenOpt = None,
) -> None:
    """Everything of yours (account, tasks with their events and files, uploads) as a zip."""
    size = client_call(lambda c: c.download("/api/v1/export", dest), server, token)
    console.print(f"Saved {dest} ({size} bytes).")


def submit(
    description: Annotated[str, typer.Argument(help="What you want done.")],
    follow: Annotated[bool, typer.Option(
        help="Show live progress until it ends; a workflow's question is asked here (an empty "
             "line leaves it for `shoal answer`).")] = False,
    no_input: Annotated[bool, typer.Option(
        "--no-input", help="With --follow: ask nothing; questions wait for `shoal answer`.")
    ] = False,
    plan: Annotated[Path | None, typer.Option(help="JSON file with your own plan.")] = None,
    privacy: Annotated[str, typer.Option(help="normal | sensitive")] = "normal",
    checkpoints: Annotated[str, typer.Option(help="low | medium | high")] = "medium",
    quality: Annotated[str, typer.Option(
        help="on | off: evaluation, peer review and checkpoints")] = "on",
    tool: Annotated[list[str] | None, typer.Option(help="Preferred tool (repeatable).")] = None,
    workflow: Annotated[str, typer.Option(help="Which workflow (shoal workflows).")] = "dag",
    param: Annotated[list[str] | None, typer.Option(
        help="A workflow parameter, NAME=VALUE (repeatable; VALUE read as JSON if it "
             "parses, else as text).")] = None,
    skip: Annotated[list[str] | None, typer.Option(
        help="An optional step of the workflow to switch off (repeatable).")] = None,
    insert: Annotated[list[str] | None, typer.Option(
        help="A role of your own, AFTER:ID:PROMPT, run after the step AFTER where the "
             "workflow allows it (repeatable).")] = None,
    source: Annotated[list[Path] | None, typer.Option(
        help="A file of yours the task reads (repeatable; a .zip brings its files): "
             "uploaded first.", exists=True, dir_okay=False, readable=True)] = None,
    budget_tokens: Annotated[int | None, typer.Option(
        help="Stop the task past this many tokens.", min=1)] = None,
    budget_cost: Annotated[float | None, typer.Option(
        help="Stop the task past this many US dollars.", min=0.000001)] = None,
    budget_seconds: Annotated[float | None, typer.Option(
        help="Stop the task this many seconds after it starts.", min=0.001)] = None,
    output: Annotated[Path | None, typer.Option(
        help="With --follow: the folder where the task's files are saved, as <task>.zip "
             "(default: results/ in the data folder, SHOAL_DATA_DIR, as `make run` does).",
        file_okay=False)] = None,
    server: ServerOpt = None, token: TokenOpt = None,
) -> None:
    """Submit a task. With --follow, watch it to its end, then see its report, its files and
    what it used; the exit status says how it ended (0 completed, 3 failed, 4 cancelled,
    5 out of budget)."""
    from shoal.cli.follow import AskQuestions
    from shoal.cli.follow import follow as follow_task
    from shoal.cli.outcome import show_ending

    body = _task_body(description, privacy=privacy, checkpoints=checkpoints, quality=quality,
                      workflow=workflow, param=param, skip=skip, insert=insert, tool=tool,
                      plan=plan, budget={"tokens": budget_tokens, "cost_usd": budget_cost,
                                         "seconds": budget_seconds})
    results = output or settings_from_env(mode="dev").data_dir / "results"

    async def go(client: ShoalClient) -> int:
        try:  # a refused task leaves no upload behind
            created, uploaded = await client.submit_reading(body, source or [])
        except ApiError as exc:
            raise refusals.refused_task(exc, body) from exc
        if uploaded:
            console.print("Sources: " + ", ".join(f"{u['name']} ({u['kind']})"
                                                  for u in uploaded), highlight=False)
        console.print(f"Task [bold]{created['task_id']}[/] {created['status']}: "
                      f"{created['message']}")
        if not follow:
            return 0
        task_id = created["task_id"]
        ask = None if no_input else AskQuestions(client, console, task_id)
        await follow_task(client, task_id, console, on_checkpoint=ask)
        return await show_ending(client, console, task_id, results=results)


    code = client_call(go, server, token)
    if code:
        raise typer.Exit(code)


def _task_body(description: str, *, privacy: str, checkpoints: str, quality: str,
               workflow: str, param: list[str] | None, skip: list[str] | None,
               insert: list[str] | None, tool: list[str] | None, plan: Path | None,
               budget: dict[str, float | None]) -> dict[str, Any]:
    """`POST /api/v1/tasks`'s body from `shoal submit`'s options."""
    body: dict[str, Any] = {"description": description, "privacy_level": privacy,
                            "checkpoint_frequency": checkpoints, "quality": quality,
                            "workflow": workflow}
    if param:
        body["parameters"] = parse_params(param)
    if skip:
        body["skip"] = skip
    if insert:
        body["insert"] = [parse_insert(i) for i in insert]
    if tool:
        body["tool_preferences"] = tool
    if plan is not None:
        body["plan"] = json.loads(plan.read_text())
    if any(v is not None for v in budget.values()):
        body["budget"] = {k: v for k, v in budget.items() if v is not None}
    return body


def tasks(
    status: Annotated[str | None, typer.Option(help="Only tasks in this status.")] = None,
    limit: Annotated[int, typer.Option()] = 20,
    server: ServerOpt = None, token: TokenOpt = None,
) -> None:
    """List your tasks, newest first; each id as short as it can be read back."""
    params: dict[str, Any] = {"limit": limit, **({"status": status} if status else {})}
    page = client_call(lambda c: c.request("GET", "/api/v1/tasks", params=params),
                       server, token)
    short = ids.short_ids([t["task_id"] for t in page["tasks"]])
    rows = [(short[t["task_id"]], t["status"], f"{t['progress']}%",
             t["created_at"][:16].replace("T", " ")) for t in page["tasks"]]
    table = Table("task", "status", "progress", "created", "description")
    for at in range(4):  # whole: an id or a status cut short reads as another
        table.columns[at].no_wrap = True
        table.columns[at].min_width = max((len(row[at]) for row in rows), default=0)
    for row, t in zip(rows, page["tasks"], strict=True):
        table.add_row(*row, Text(t["description"][:60]))
    console.print(table)
    example = next(iter(short.values()), "ID")
    console.print(f"{len(page['tasks'])} of {page['total']}. A task's id, or its first "
                  f"{ids.MIN_PREFIX} or more characters, names it: shoal task show {example}",
                  soft_wrap=True, highlight=False)


def cancel(task_id: TaskArg, server: ServerOpt = None, token: TokenOpt = None) -> None:
    """Cancel a task and stop its agents."""
    r = on_task(task_id, lambda c, tid: c.request("POST", f"/api/v1/tasks/{tid}/cancel"),
                server, token)
    console.print(f"{r['task_id']} {r['status']}: {r['message']}")


def parse_insert(text: str) -> dict[str, str]:
    """`AFTER:ID:PROMPT` as an inserted role."""
    after, _, rest = text.partition(":")
    name, _, prompt = rest.partition(":")
    if not (after.strip() and name.strip() and prompt.strip()):
        raise typer.BadParameter(f"{text!r}: write AFTER:ID:PROMPT, e.g. "
                                 "'write:factcheck:Check the facts of {draft}'.",
                                 param_hint="--insert")
    return {"after": after.strip(), "id": name.strip(), "prompt": prompt.strip()}


def parse_params(pairs: list[str]) -> dict[str, Any]:
    """`NAME=VALUE` pairs as a mapping; a VALUE that parses as JSON is taken as JSON."""
    found: dict[str, Any] = {}
    for pair in pairs:
        name, sep, text = pair.partition("=")
        if not sep or not name.strip():
            raise typer.BadParameter(f"{pair!r}: write NAME=VALUE.", param_hint="--param")
        try:
            found[name.strip()] = json.loads(text)
        except ValueError:
            found[name.strip()] = text
    return found
