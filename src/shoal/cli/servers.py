"""`shoal up`, `shoal serve`, `shoal demo-model` and `shoal mcp`: the servers this machine runs."""

from __future__ import annotations

import contextlib
import errno
import os
import socket
from typing import Annotated

import typer

from shoal.cli.base import console, err, run, settings_from_env
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
    sock = listening_socket(host, port, command="up")  # before the slow imports: said at once
    from shoal.cli.embedded import run_embedded, up_settings

    settings = up_settings(settings_from_env(host=host, port=port,
                                             mode=os.environ.get("SHOAL_MODE", "dev")))
    configure_logging("warning")
    sample = {"description": SAMPLES[workflow], "workflow": workflow} if demo else None
    code = run(lambda: run_embedded(settings, console=console, demo_task=sample, slots=slots,
                                    sock=sock))
    raise typer.Exit(code)


def serve(
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
) -> None:
    """Run one control-plane copy (production: PostgreSQL + Redis via SHOAL_* settings)."""
    settings = settings_from_env(host=host, port=port)
    sock = listening_socket(host, port, command="serve")
    configure_logging("info", access_log=True)
    import uvicorn

    from shoal.api.app import create_app
    from shoal.api.server import uvicorn_options

    # log_config=None: uvicorn's own handlers would print request lines unredacted.
    config = uvicorn.Config(create_app(settings), host=host, port=sock.getsockname()[1],
                            log_level="info", log_config=None, timeout_graceful_shutdown=30,
                            **uvicorn_options(settings))
    server = uvicorn.Server(config)
    with contextlib.suppress(KeyboardInterrupt):
        server.run(sockets=[sock])
    if not server.started:  # its start-up failed, and said why
        raise typer.Exit(3)


def listening_socket(host: str, port: int, *, command: str) -> socket.socket:
    """The socket `shoal up` or `shoal serve` listens on, bound before anything starts: a
    port that is taken (or an address this machine does not have) is one sentence saying
    what to do, at once."""
    from shoal.api.listen import bind_socket

    try:
        return bind_socket(host, port)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            other = _free_port(host, port)
            make = f" (or: make run PORT={other}, make up PORT={other})" if command == "up" else ""
            err.print(f"Port {port} on {host} is taken: another program (another Shoal?) "
                      f"listens there. Choose another port: shoal {command} --port {other}"
                      f"{make}.", markup=False, highlight=False, soft_wrap=True)
        elif exc.errno in (errno.EACCES, errno.EPERM):
            err.print(f"Port {port} on {host} needs privileges this user does not have; "
                      f"choose one above 1023: shoal {command} --port 8000.", markup=False,
                      highlight=False, soft_wrap=True)
        else:
            err.print(f"Cannot listen on {host}:{port}: {exc.strerror}. Check --host (an "
                      "address of this machine, or 0.0.0.0 for all) and --port.",
                      markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None


def _free_port(host: str, taken: int) -> int:
    """A port near `taken` that nothing listens on now (to suggest; not held)."""
    from shoal.api.listen import bind_socket

    for port in range(taken + 1, min(taken + 100, 65535)):
        try:
            bind_socket(host, port).close()
        except OSError:
            continue
        return port
    return taken + 1


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
