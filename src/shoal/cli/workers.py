"""`shoal worker`: connect this machine to a control plane, or check which AI tools it has."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from shoal.cli.base import console, run, settings_from_env, worker_settings
from shoal.logs import configure_logging


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

    from shoal.tools.registry import BUILT_IN, probe_tools

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
    if not any(p.available and p.name not in BUILT_IN for p in probes):
        console.print("No AI tool found: this worker could only run Shoal's built-in tools "
                      f"({', '.join(sorted(BUILT_IN))}).")
        raise typer.Exit(1)
