"""`shoal up`, `shoal serve`, `shoal demo-model` and `shoal mcp`: the servers this machine runs."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from shoal.cli.base import console, run, settings_from_env
from shoal.demo.samples import SAMPLES
from shoal.logs import configure_logging


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
    from shoal.cli.embedded import run_embedded, up_settings

    configure_logging("warning")
    settings = up_settings(settings_from_env(host=host, port=port,
                                             mode=os.environ.get("SHOAL_MODE", "dev")))
    sample = {"description": SAMPLES[workflow], "workflow": workflow} if demo else None
    code = run(lambda: run_embedded(settings, console=console, demo_task=sample, slots=slots))
    raise typer.Exit(code)


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


def mcp_server(name: Annotated[str, typer.Argument(
        help="places, calendar, telephone, sources or literature")]) -> None:
    """Serve one of Shoal's bundled MCP servers over stdio (agents' clients start these)."""
    from shoal.mcp_servers import NAMES, serve

    if name not in NAMES:
        console.print(f"[red]No bundled MCP server '{name}'; choose one of "
                      f"{', '.join(NAMES)}.[/]")
        raise typer.Exit(2)
    serve(name)


def demo_model(
    host: Annotated[str, typer.Option()] = "127.0.0.1",
    port: Annotated[int, typer.Option()] = 8765,
) -> None:
    """Serve the scripted demo model (OpenAI-compatible; not a real model)."""
    from shoal.demo.model import serve_demo_model

    console.print(f"Demo model at http://{host}:{port}/v1 — scripted answers, not a real model. "
                  "Connect a real one with SHOAL_OPENAI_COMPAT_BASE_URL.")
    run(lambda: serve_demo_model(host, port))
