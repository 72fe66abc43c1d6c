"""The `shoal` command: up | serve | worker | submit | tasks | task | cancel | user | token | db."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from shoal.config import DEV_SECRET, Settings
from shoal.errors import ShoalError
from shoal.logs import configure_logging

app = typer.Typer(help="Shoal: plan a task into a graph of agents and run it on many machines.",
                  no_args_is_help=True, add_completion=False)
user_app = typer.Typer(help="Manage user accounts.", no_args_is_help=True)
token_app = typer.Typer(help="Manage worker tokens.", no_args_is_help=True)
db_app = typer.Typer(help="Database maintenance.", no_args_is_help=True)
task_app = typer.Typer(help="Look at one task.", no_args_is_help=True)
app.add_typer(user_app, name="user")
app.add_typer(token_app, name="token")
app.add_typer(db_app, name="db")
app.add_typer(task_app, name="task")
console = Console()
err = Console(stderr=True)
T = TypeVar("T")
SAMPLE_TASK = "Build a CLI todo app with tests"


def settings_from_env(**overrides: Any) -> Settings:
    """Settings from the environment; a clear message (not a traceback) when they are wrong."""
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        first = exc.errors()[0]
        err.print(f"[red]Configuration error:[/] {first.get('msg')}")
        raise typer.Exit(2) from exc


def run(coro_fn: Callable[[], Awaitable[T]]) -> T:
    """Run an async command; Shoal errors become one red line and exit code 1."""
    import httpx

    try:
        return asyncio.run(coro_fn())  # type: ignore[arg-type]
    except ShoalError as exc:
        err.print(f"[red]{exc.message}[/]")
        raise typer.Exit(1) from exc
    except httpx.TransportError as exc:
        where = exc.request.url if exc.request else "the server"
        err.print(f"[red]Cannot reach the control plane ({where}): {exc}. Is it running? "
                  "Start one with `shoal up`, or pass --server.[/]")
        raise typer.Exit(1) from exc
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


# ---- servers ----------------------------------------------------------------------------------


@app.command()
def up(
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    demo: Annotated[bool, typer.Option(
        help="Submit a sample task, follow it, and exit when it ends.")] = False,
    slots: Annotated[int, typer.Option(help="Slots of the local worker.")] = 2,
) -> None:
    """Run everything on this machine: SQLite, in-process bus, demo model and one worker."""
    from shoal.embedded import run_embedded

    configure_logging("warning")
    mode = os.environ.get("SHOAL_MODE", "dev")
    settings = settings_from_env(host=host, port=port, mode=mode)
    if settings.secret_key == DEV_SECRET:
        settings = settings.model_copy(update={"secret_key": _persistent_secret(settings)})
    code = run(lambda: run_embedded(settings, console=console, demo_task=SAMPLE_TASK if demo
                                    else None, slots=slots))
    raise typer.Exit(code)


def _persistent_secret(settings: Settings) -> str:
    path = settings.data_dir / "secret_key"
    if not path.exists():
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        path.touch(mode=0o600)
        path.write_text(secrets.token_urlsafe(48))
    return path.read_text().strip()


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
) -> None:
    """Run one control-plane copy (production: PostgreSQL + Redis via SHOAL_* settings)."""
    settings = settings_from_env(host=host, port=port)
    configure_logging("info")
    import uvicorn

    from shoal.api.app import create_app

    uvicorn.run(create_app(settings), host=host, port=port, log_level="info",
                ws_ping_interval=20, ws_max_size=2 * settings.max_result_bytes,
                timeout_graceful_shutdown=30)


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
    settings = settings_from_env()
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
        text = probe.detail if probe.available else f"{probe.detail}. To enable: {probe.enable}"
        table.add_row(probe.name, found, probe.version or "", "yes" if probe.local else "no",
                      text)
    console.print(table)
    if not any(p.available and p.name != "echo" for p in probes):
        console.print("No AI tool found: this worker could only run the test tool `echo`.")
        raise typer.Exit(1)


@app.command("demo-model")
def demo_model(
    host: Annotated[str, typer.Option()] = "127.0.0.1",
    port: Annotated[int, typer.Option()] = 8765,
) -> None:
    """Serve the scripted demo model (OpenAI-compatible; not a real model)."""
    from shoal.testing.demo_model import serve_demo_model

    console.print(f"Demo model at http://{host}:{port}/v1 — scripted answers, not a real model. "
                  "Connect a real one with SHOAL_OPENAI_COMPAT_BASE_URL.")
    run(lambda: serve_demo_model(host, port))


# ---- client commands --------------------------------------------------------------------------


def _client_call(fn: Callable[[Any], Awaitable[T]], server: str | None,
                 token: str | None) -> T:
    from shoal.client import ShoalClient, load_credentials

    settings = settings_from_env(mode=os.environ.get("SHOAL_MODE", "dev"))

    async def go() -> T:
        async with ShoalClient(load_credentials(settings.data_dir, server, token)) as client:
            return await fn(client)

    return run(go)


ServerOpt = Annotated[str | None, typer.Option(help="Control plane URL (or SHOAL_SERVER).")]
TokenOpt = Annotated[str | None, typer.Option(help="Access token (or SHOAL_TOKEN).")]


@app.command()
def submit(
    description: Annotated[str, typer.Argument(help="What you want done.")],
    follow: Annotated[bool, typer.Option(help="Show live progress until it ends.")] = False,
    plan: Annotated[Path | None, typer.Option(help="JSON file with your own plan.")] = None,
    privacy: Annotated[str, typer.Option(help="normal | sensitive")] = "normal",
    checkpoints: Annotated[str, typer.Option(help="low | medium | high")] = "medium",
    tool: Annotated[list[str] | None, typer.Option(help="Preferred tool (repeatable).")] = None,
    server: ServerOpt = None, token: TokenOpt = None,
) -> None:
    """Submit a task; with --follow, exit non-zero if it does not complete."""
    from shoal.follow import follow as follow_task

    body: dict[str, Any] = {"description": description, "privacy_level": privacy,
                            "checkpoint_frequency": checkpoints}
    if tool:
        body["tool_preferences"] = tool
    if plan is not None:
        body["plan"] = json.loads(plan.read_text())

    async def go(client: Any) -> str:
        created = await client.submit(body)
        console.print(f"Task [bold]{created['task_id']}[/] {created['status']}: "
                      f"{created['message']}")
        if not follow:
            return "submitted"
        return await follow_task(client, created["task_id"], console)

    status = _client_call(go, server, token)
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
    page = _client_call(lambda c: c.request("GET", "/api/v1/tasks", params=params),
                        server, token)
    table = Table("task", "status", "progress", "created", "description")
    for t in page["tasks"]:
        table.add_row(t["task_id"], t["status"], f"{t['progress']}%", t["created_at"][:19],
                      t["description"][:60])
    console.print(table)
    console.print(f"{len(page['tasks'])} of {page['total']}")


@task_app.command("show")
def task_show(task_id: str, server: ServerOpt = None, token: TokenOpt = None) -> None:
    """A task with its subtasks."""
    t = _client_call(lambda c: c.task(task_id), server, token)
    console.print(f"[bold]{t['task_id']}[/]  {t['status']}  {t['progress']}%")
    console.print(t["description"])
    if t.get("error"):
        console.print(f"[red]{t['error']}[/]")
    table = Table("subtask", "status", "worker", "tool", "attempts")
    for s in t["subtasks"]:
        table.add_row(s["name"], s["status"], s.get("assigned_worker") or "",
                      s.get("assigned_tool") or "", str(s["attempts"]))
    console.print(table)


@app.command()
def cancel(task_id: str, server: ServerOpt = None, token: TokenOpt = None) -> None:
    """Cancel a task and stop its agents."""
    r = _client_call(lambda c: c.request("POST", f"/api/v1/tasks/{task_id}/cancel"),
                     server, token)
    console.print(f"{r['task_id']} {r['status']}: {r['message']}")


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


def main() -> None:
    """Entry point of the `shoal` command."""
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    app()
