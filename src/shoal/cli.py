"""The `shoal` command: up | serve | worker | submit | tasks | task | cancel | checkpoints |
checkpoint | approve | reject | correct | answer | workflows | user | token | db | backup |
restore."""

from __future__ import annotations

import functools
import json
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from shoal.cli_backup import backup, restore
from shoal.cli_base import (
    ServerOpt,
    T,
    TokenOpt,
    client_call,
    console,
    err,
    run,
    settings_from_env,
    worker_settings,
)
from shoal.cli_tasks import export_account, task_app
from shoal.cli_workflows import workflows_app
from shoal.config import Settings
from shoal.demo.samples import SAMPLES
from shoal.errors import ShoalError
from shoal.logs import configure_logging

if TYPE_CHECKING:
    from shoal.client import ApiError

app = typer.Typer(help="Shoal: plan a task into a graph of agents and run it on many machines.",
                  no_args_is_help=True, add_completion=False)
user_app = typer.Typer(help="Manage user accounts.", no_args_is_help=True)
token_app = typer.Typer(help="Manage worker tokens.", no_args_is_help=True)
db_app = typer.Typer(help="Database maintenance.", no_args_is_help=True)
checkpoint_app = typer.Typer(help="Look at one checkpoint.", no_args_is_help=True)
app.add_typer(user_app, name="user")
app.add_typer(token_app, name="token")
app.add_typer(db_app, name="db")
app.add_typer(task_app, name="task")
app.command("export")(export_account)
app.command("backup")(backup)
app.command("restore")(restore)
app.add_typer(checkpoint_app, name="checkpoint")
app.add_typer(workflows_app, name="workflows")
# ---- servers ----------------------------------------------------------------------------------


@app.command()
def up(
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    demo: Annotated[bool, typer.Option(
        help="Submit a sample task, follow it, and exit when it ends.")] = False,
    slots: Annotated[int, typer.Option(help="Slots of the local worker.")] = 2,
    workflow: Annotated[str, typer.Option(
        help=f"With --demo: the workflow of the sample task ({', '.join(SAMPLES)}).")] = "dag",
) -> None:
    """Run everything on this machine: SQLite, in-process bus, demo model and one worker."""
    if workflow not in SAMPLES:
        console.print(f"[red]No sample for workflow '{workflow}'; choose one of "
                      f"{', '.join(SAMPLES)}.[/]")
        raise typer.Exit(2)
    from shoal.embedded import run_embedded, up_settings

    configure_logging("warning")
    settings = up_settings(settings_from_env(host=host, port=port,
                                             mode=os.environ.get("SHOAL_MODE", "dev")))
    sample = {"description": SAMPLES[workflow], "workflow": workflow} if demo else None
    code = run(lambda: run_embedded(settings, console=console, demo_task=sample, slots=slots))
    raise typer.Exit(code)


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
) -> None:
    """Run one control-plane copy (production: PostgreSQL + Redis via SHOAL_* settings)."""
    settings = settings_from_env(host=host, port=port)
    configure_logging("info", access_log=True)
    import uvicorn

    from shoal.api.app import create_app
    from shoal.api.server import uvicorn_options

    # log_config=None: uvicorn's own handlers would print request lines unredacted.
    uvicorn.run(create_app(settings), host=host, port=port, log_level="info", log_config=None,
                timeout_graceful_shutdown=30, **uvicorn_options(settings))


@app.command()
def worker(
    server: Annotated[str | None, typer.Option(
        help="Control plane URL, e.g. http://host:8000.")] = None,
    token: Annotated[str | None, typer.Option(help="Worker token from `shoal token create`.",
                                              envvar="SHOAL_WORKER_TOKEN")] = None,
    name: Annotated[str | None, typer.Option(help="Name shown in the fleet.")] = None,
    slots: Annotated[int | None, typer.Option(help="Attempts run at once.")] = None,
    check: Annotated[bool, typer.Option(
        "--check", help="Only print which AI tools this machine has, and how to enable the "
        "others; then exit.")] = False,
) -> None:
    """Connect this machine to a control plane and run the attempts it sends."""
    if check:
        _check_tools()
        return
    if not server or not token:
        missing = "--server" if not server else "--token (or SHOAL_WORKER_TOKEN)"
        console.print(f"[red]Missing {missing}.[/red] Run `shoal worker --server URL --token T`"
                      " (a token comes from `shoal token create`), or `shoal worker --check`.")
        raise typer.Exit(2)
    from shoal.worker.agent import run_worker

    configure_logging("info")
    settings = worker_settings()
    run(lambda: run_worker(settings, server, token, name=name, slots=slots))


def _check_tools() -> None:
    """Print the tool probes as a table; exit 1 when no AI tool (beyond echo) was found."""
    from rich.table import Table

    from shoal.tools.registry import probe_tools

    settings = settings_from_env(mode=os.environ.get("SHOAL_MODE", "dev"))
    probes = run(lambda: probe_tools(settings))
    table = Table(title="AI tools on this machine")
    for column in ("tool", "found", "version", "local", "details / how to enable"):
        table.add_column(column)
    for probe in probes:
        found = "[green]yes[/green]" if probe.available else "[red]no[/red]"
        text = (probe.detail if probe.available
                else f"{probe.detail.rstrip('.')}. To enable: {probe.enable}")
        table.add_row(probe.name, found, probe.version or "", "yes" if probe.local else "no",
                      text)
    console.print(table)
    if not any(p.available and p.name not in ("echo", "evaluator") for p in probes):
        console.print("No AI tool found: this worker could only run the built-in `echo` and "
                      "`evaluator` tools.")
        raise typer.Exit(1)


@app.command("mcp")
def mcp_server(name: Annotated[str, typer.Argument(
        help="places, calendar, telephone, sources or literature")]) -> None:
    """Serve one of Shoal's bundled MCP servers over stdio (agents' clients start these)."""
    from shoal.mcp_servers import NAMES, serve

    if name not in NAMES:
        console.print(f"[red]No bundled MCP server '{name}'; choose one of "
                      f"{', '.join(NAMES)}.[/]")
        raise typer.Exit(2)
    serve(name)


@app.command("demo-model")
def demo_model(
    host: Annotated[str, typer.Option()] = "127.0.0.1",
    port: Annotated[int, typer.Option()] = 8765,
) -> None:
    """Serve the scripted demo model (OpenAI-compatible; not a real model)."""
    from shoal.demo.model import serve_demo_model

    console.print(f"Demo model at http://{host}:{port}/v1 — scripted answers, not a real model. "
                  "Connect a real one with SHOAL_OPENAI_COMPAT_BASE_URL.")
    run(lambda: serve_demo_model(host, port))


# ---- client commands --------------------------------------------------------------------------


@app.command()
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
    server: ServerOpt = None, token: TokenOpt = None,
) -> None:
    """Submit a task; with --follow, exit non-zero if it does not complete."""
    from shoal.follow import AskQuestions
    from shoal.follow import follow as follow_task

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
    budget = {k: v for k, v in (("tokens", budget_tokens), ("cost_usd", budget_cost),
                                ("seconds", budget_seconds)) if v is not None}
    if budget:
        body["budget"] = budget

    async def go(client: Any) -> str:
        if source:
            uploaded = await client.upload(source)
            body["sources"] = [u["upload_id"] for u in uploaded]
            console.print("Sources: " + ", ".join(f"{u['name']} ({u['kind']})"
                                                  for u in uploaded), highlight=False)
        created = await client.submit(body)
        console.print(f"Task [bold]{created['task_id']}[/] {created['status']}: "
                      f"{created['message']}")
        if not follow:
            return "submitted"
        task_id = created["task_id"]
        ask = None if no_input else AskQuestions(client, console, task_id)
        return await follow_task(client, task_id, console, on_checkpoint=ask)

    status = client_call(go, server, token)
    if follow and status != "completed":
        raise typer.Exit(1)


@app.command()
def tasks(
    status: Annotated[str | None, typer.Option(help="Only tasks in this status.")] = None,
    limit: Annotated[int, typer.Option()] = 20,
    server: ServerOpt = None, token: TokenOpt = None,
) -> None:
    """List your tasks, newest first."""
    params: dict[str, Any] = {"limit": limit, **({"status": status} if status else {})}
    page = client_call(lambda c: c.request("GET", "/api/v1/tasks", params=params),
                        server, token)
    table = Table("task", "status", "progress", "created", "description")
    for t in page["tasks"]:
        table.add_row(t["task_id"], t["status"], f"{t['progress']}%", t["created_at"][:19],
                      t["description"][:60])
    console.print(table)
    console.print(f"{len(page['tasks'])} of {page['total']}")


@app.command()
def cancel(task_id: str, server: ServerOpt = None, token: TokenOpt = None) -> None:
    """Cancel a task and stop its agents."""
    r = client_call(lambda c: c.request("POST", f"/api/v1/tasks/{task_id}/cancel"),
                     server, token)
    console.print(f"{r['task_id']} {r['status']}: {r['message']}")


# ---- checkpoints ------------------------------------------------------------------------------


class CorrectionType(StrEnum):
    """What a correction asks the agent to change."""

    WRONG_APPROACH = "wrong_approach"
    INCOMPLETE = "incomplete"
    BUG = "bug"
    STYLE = "style"
    MISSING_FEATURE = "missing_feature"
    OTHER = "other"


FLAGS = {"subtask_id": "--subtask", "correction_type": "--type", "guidance": "--guidance",
         "reference_files": "--reference", "reason": "--reason"}


def _checkpoint_call(checkpoint_id: str, fn: Callable[[Any], Awaitable[T]],
                     server: str | None, token: str | None) -> T:
    """`_client_call` about one checkpoint: its 404, 409 and 422 answers become sentences."""
    from shoal.client import ApiError

    async def go(client: Any) -> T:
        try:
            return await fn(client)
        except ApiError as exc:
            raise ShoalError(_checkpoint_error(checkpoint_id, exc), code=exc.code) from exc

    return client_call(go, server, token)


def _checkpoint_error(checkpoint_id: str, exc: ApiError) -> str:
    """What went wrong with a checkpoint command, and what to do about it."""
    details = exc.details
    if exc.status == 404:
        return (f"No checkpoint {checkpoint_id} (or it is not yours). "
                "List the open ones with: shoal checkpoints")
    if exc.code == "checkpoint_decided":
        status = details.get("status") if isinstance(details, dict) else None
        return (f"Checkpoint {checkpoint_id} was already decided"
                f"{f' ({status})' if status else ''}. "
                f"See it with: shoal checkpoint show {checkpoint_id}")
    if exc.status == 422 and isinstance(details, list) and details:
        return "; ".join(f"Invalid {FLAGS.get(d.get('field'), d.get('field'))}: "
                         f"{d.get('message')}" for d in details)
    if exc.status == 422 and isinstance(details, dict) and details.get("field"):
        return f"Invalid {FLAGS.get(details['field'], details['field'])}: {exc.message}"
    return str(exc.message)


@app.command("checkpoints")
def checkpoints_list(
    task: Annotated[str | None, typer.Option("--task", help="Only this task's (its id).")] = None,
    show_all: Annotated[bool, typer.Option(
        "--all", help="Decided checkpoints too, not only those waiting for you.")] = False,
    limit: Annotated[int, typer.Option()] = 50,
    server: ServerOpt = None, token: TokenOpt = None,
) -> None:
    """List the checkpoints waiting for you, newest first."""
    from shoal.follow import age, clip, score_label

    status = None if show_all else "pending_review"
    page = client_call(lambda c: c.checkpoints(status, task, limit=limit), server, token)
    if not page["checkpoints"]:
        console.print("No checkpoints." if show_all else "No checkpoint is waiting for you.")
        return
    for cp in page["checkpoints"]:  # one block each: readable at any width, ids whole
        subtask = (cp.get("subtask") or {}).get("name", "")
        head = Text.assemble(
            (cp["checkpoint_id"], "bold"), "  ", (cp["reason"], "yellow"), "  ",
            score_label(cp) or "no score", "  ", f"{age(cp['triggered_at'])} ago",
            f"  task {cp['task_id'][:8]}", (f"  {cp['status']}" if show_all else ""))
        console.print(head, no_wrap=True, overflow="ignore", crop=False)
        detail = " · ".join(part for part in (subtask, clip(cp.get("message") or "", 300))
                            if part)
        if detail:
            console.print(Text("    " + detail))
    console.print(f"{len(page['checkpoints'])} of {page['total']}. Details: shoal checkpoint "
                  "show ID. Answer: shoal approve ID | shoal reject ID --reason TEXT | "
                  "shoal correct ID --type TYPE --guidance TEXT | shoal answer ID TEXT (a "
                  "question)", soft_wrap=True)


@checkpoint_app.command("show")
def checkpoint_show(checkpoint_id: str, server: ServerOpt = None,
                    token: TokenOpt = None) -> None:
    """A checkpoint in full: why it opened, the scores, what was done and what comes next."""
    from shoal import follow

    cp = _checkpoint_call(checkpoint_id, lambda c: c.checkpoint(checkpoint_id), server, token)
    cid = cp["checkpoint_id"]
    say = functools.partial(console.print, soft_wrap=True, markup=False)  # data, not markup
    opened = follow.age(cp["triggered_at"])
    console.print(f"[bold]Checkpoint {cid}[/]  {cp['status']}  (opened {opened} ago)",
                  soft_wrap=True)
    say(f"Task {cp['task_id']}: {cp['task_description']}")
    say(f"Why: {follow.describe_reason(cp['reason'])} ({cp['reason']}). {cp.get('message') or ''}")
    for part in (*follow.checkpoint_scores(cp), *follow.checkpoint_work(cp),
                 *follow.checkpoint_corrections(cp)):
        say(part)
    if cp["status"] == "pending_review":
        if cp.get("deadline_at"):
            say(f"Deadline: {cp['deadline_at']} (then: {cp['deadline_action']})")
        if cp.get("question"):
            say(f"Question: {cp['question']}")
        say("Answer it with one of:")
        for command in follow.answer_commands(cid, cp["reason"]):
            say(f"  {command}")
    else:
        say(f"Decided: {cp.get('decision')} at {cp.get('decided_at')}"
            + (f" — {cp['notes']}" if cp.get("notes") else ""))


@app.command()
def approve(checkpoint_id: str, server: ServerOpt = None, token: TokenOpt = None) -> None:
    """Approve a checkpoint: the work so far is accepted and the task continues."""
    r = _checkpoint_call(checkpoint_id, lambda c: c.approve(checkpoint_id), server, token)
    console.print(f"Checkpoint {r['checkpoint_id']} {r['status']}: {r['message']}")


@app.command()
def answer(
    ident: Annotated[str, typer.Argument(
        metavar="ID", help="The question's checkpoint id, or its task's id.")],
    text: Annotated[str, typer.Argument(help="Your answer.")],
    server: ServerOpt = None, token: TokenOpt = None,
) -> None:
    """Answer a workflow's question (a `human` step) by its checkpoint's id, or by its task's
    id (the task's open question); the task goes on with your answer."""
    from shoal.client import ApiError
    from shoal.follow import post_answer

    async def go(client: Any) -> dict[str, Any]:
        try:
            return await post_answer(client, ident, text)
        except ApiError as exc:
            if exc.status != 404:
                raise ShoalError(_checkpoint_error(ident, exc), code=exc.code) from exc
        cid = await _open_question(client, ident)  # not a checkpoint of yours: a task?
        try:
            return await post_answer(client, cid, text)
        except ApiError as exc:
            raise ShoalError(_checkpoint_error(cid, exc), code=exc.code) from exc

    r = client_call(go, server, token)
    console.print(f"Checkpoint {r['checkpoint_id']} {r['status']}: {r['message']}")


async def _open_question(client: Any, task_id: str) -> str:
    """The id of the question the task waits at; a `ShoalError` saying why there is none."""
    from shoal.client import ApiError

    unknown = ShoalError(f"No checkpoint or task {task_id} (or it is not yours). List the "
                         "questions waiting for you with: shoal checkpoints", code="not_found")
    try:
        page = await client.checkpoints("pending_review", task_id, limit=200)
        task = await client.task(task_id)
    except ApiError as exc:
        if exc.status == 404:
            raise unknown from exc
        raise
    open_ = page["checkpoints"]
    questions = [cp for cp in open_ if cp["reason"] == "question"]
    if len(questions) == 1:
        return str(questions[0]["checkpoint_id"])
    if questions:
        listed = "; ".join(f"{cp['checkpoint_id']} ({cp.get('question') or 'no text'})"
                           for cp in questions)
        raise ShoalError(f"Task {task_id} waits at {len(questions)} questions; answer one by "
                         f"its checkpoint id: {listed}", code="ambiguous")
    waiting = (f"; it waits at a {open_[0]['reason']} checkpoint: shoal checkpoint show "
               f"{open_[0]['checkpoint_id']}") if open_ else ""
    raise ShoalError(f"Task {task_id} has no open question (it is {task['status']}){waiting}.",
                     code="no_question")


@app.command()
def reject(
    checkpoint_id: str,
    reason: Annotated[str, typer.Option(help="Why the work is not acceptable.")],
    server: ServerOpt = None, token: TokenOpt = None,
) -> None:
    """Reject a checkpoint: the task is cancelled and its agents are stopped."""
    r = _checkpoint_call(checkpoint_id, lambda c: c.reject(checkpoint_id, reason),
                         server, token)
    console.print(f"Checkpoint {r['checkpoint_id']} {r['status']}: {r['message']}")


@app.command()
def correct(
    checkpoint_id: str,
    correction_type: Annotated[CorrectionType, typer.Option(
        "--type", help="What kind of change is needed.")],
    guidance: Annotated[str, typer.Option(help="What the agent should change, in words.")],
    subtask: Annotated[str | None, typer.Option(
        help="The subtask to redo (default: the one the checkpoint is about).")] = None,
    reference: Annotated[list[str] | None, typer.Option(
        help="A file the agent should look at (repeatable).")] = None,
    apply_to_future: Annotated[bool, typer.Option(
        "--apply-to-future", help="Remember this guidance for your later tasks.")] = False,
    server: ServerOpt = None, token: TokenOpt = None,
) -> None:
    """Send a subtask back with guidance: it runs again, then is evaluated again."""
    r = _checkpoint_call(checkpoint_id, lambda c: c.correct(
        checkpoint_id, correction_type=correction_type.value, guidance=guidance,
        subtask_id=subtask, reference_files=reference or (), apply_to_future=apply_to_future),
        server, token)
    console.print(f"Checkpoint {r['checkpoint_id']} corrected: {r['message']} "
                  f"(correction subtask {r['correction_subtask_id']})", soft_wrap=True)


@app.command()
def login(
    server: Annotated[str, typer.Option(help="Control plane URL.")],
    username: Annotated[str, typer.Option()],
    password: Annotated[str, typer.Option(prompt=True, hide_input=True)],
) -> None:
    """Sign in and remember the session for later commands."""
    import httpx

    from shoal.client import save_credentials

    settings = settings_from_env(mode=os.environ.get("SHOAL_MODE", "dev"))
    resp = httpx.post(f"{server.rstrip('/')}/api/v1/auth/login",
                      json={"username": username, "password": password}, timeout=30)
    if resp.status_code != 200:
        err.print(f"[red]{resp.json().get('message', resp.text)}[/]")
        raise typer.Exit(1)
    body = resp.json()
    path = save_credentials(settings.data_dir, server, body["access_token"],
                            body["refresh_token"])
    console.print(f"Signed in as {username}; session saved in {path}.")


# ---- administration (against the database the settings name) ----------------------------------


def _with_db(fn: Callable[[Any, Settings], Awaitable[T]]) -> T:
    from shoal.store.db import Database

    settings = settings_from_env(mode=os.environ.get("SHOAL_MODE", "dev"))

    async def go() -> T:
        db = Database.connect(settings.resolved_database_url)
        try:
            await db.migrate()
            return await fn(db, settings)
        finally:
            await db.dispose()

    return run(go)


@user_app.command("create")
def user_create(
    username: Annotated[str, typer.Option()],
    password: Annotated[str, typer.Option(prompt=True, hide_input=True)],
    is_admin: Annotated[bool, typer.Option("--admin", help="Grant admin rights.")] = False,
) -> None:
    """Create a user account."""
    from shoal import admin

    user_id = _with_db(lambda db, s: admin.create_user(db, s, username=username,
                                                       password=password, admin=is_admin))
    console.print(f"Created user {username} ({user_id}){' as admin' if is_admin else ''}.")


@token_app.command("create")
def token_create(
    worker_name: Annotated[str, typer.Option("--worker", help="Which worker it is for.")],
) -> None:
    """Create a worker token; prints the token alone on stdout."""
    from shoal import admin

    token = _with_db(lambda db, s: admin.create_worker_token(db, name=worker_name))
    sys.stdout.write(token + "\n")


@db_app.command("upgrade")
def db_upgrade() -> None:
    """Migrate the database to the newest schema."""

    async def noop(db: Any, settings: Settings) -> str:
        return settings.resolved_database_url.split("@")[-1]

    where = _with_db(noop)
    console.print(f"Database is at the newest schema ({where}).")


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


def main() -> None:
    """Entry point of the `shoal` command."""
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    app()
