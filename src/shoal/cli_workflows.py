"""`shoal workflows`: list, show, add and remove workflows, and check a document."""

from __future__ import annotations

import urllib.parse
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from shoal.cli_base import ServerOpt, TokenOpt, client_call, console, err

workflows_app = typer.Typer(help="Workflow documents.", no_args_is_help=True)


@workflows_app.command("list")
def workflows_list(server: ServerOpt = None, token: TokenOpt = None) -> None:
    """The workflows this control plane runs."""
    listed = client_call(lambda c: c.request("GET", "/api/v1/workflows"), server, token)
    table = Table("workflow", "description")
    for flow in listed["workflows"]:
        table.add_row(flow["name"], flow["description"])
    console.print(table)


@workflows_app.command("show")
def workflows_show(name: str, server: ServerOpt = None, token: TokenOpt = None) -> None:
    """One workflow: its description and, for a document, the document."""
    path = f"/api/v1/workflows/{urllib.parse.quote(name, safe='')}"
    flow = client_call(lambda c: c.request("GET", path), server, token)
    console.print(f"[bold]{flow['name']}[/]: {flow['description']}", highlight=False)
    if flow.get("document"):
        console.print_json(data=flow["document"])


@workflows_app.command("check")
def workflows_check(
    path: Annotated[Path, typer.Argument(help="A workflow document (YAML).")],
) -> None:
    """Check a workflow document; names the file, line and field of what is wrong."""
    from shoal.workflows.document import DocumentError, load_document

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        err.print(f"{path}: cannot be read ({exc.__class__.__name__}).")
        raise typer.Exit(2) from None
    try:
        doc = load_document(text, source=str(path))
    except DocumentError as exc:
        err.print(exc.message, markup=False, highlight=False)
        raise typer.Exit(1) from None
    console.print(f"{path}: {doc.name} v{doc.version} is valid (steps: {len(doc.steps)}, "
                  f"roles: {len(doc.roles)}, parameters: {len(doc.parameters)}, "
                  f"loops: {len(doc.loops)}).", markup=False, highlight=False)
