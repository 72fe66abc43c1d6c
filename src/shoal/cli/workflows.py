"""`shoal workflows`: list, show, add and remove workflows, and check a document."""

from __future__ import annotations

import urllib.parse
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from shoal.cli.base import ServerOpt, TokenOpt, client_call, console, err
from shoal.cli.client import ApiError, ShoalClient
from shoal.cli.refusals import no_workflow
from shoal.errors import NotFound

workflows_app = typer.Typer(help="Workflow documents.", no_args_is_help=True)


@workflows_app.command("list")
def workflows_list(server: ServerOpt = None, token: TokenOpt = None) -> None:
    """The workflows this control plane runs."""
    listed = client_call(lambda c: c.request("GET", "/api/v1/workflows"), server, token)
    table = Table("workflow", "description", "yours")
    for flow in listed["workflows"]:
        table.add_row(flow["name"], flow["description"],
                      f"v{flow['version']}" if flow.get("yours") else "")
    console.print(table)


@workflows_app.command("show")
def workflows_show(name: str, server: ServerOpt = None, token: TokenOpt = None) -> None:
    """One workflow: its description and, for a document, the document."""
    path = f"/api/v1/workflows/{urllib.parse.quote(name, safe='')}"

    async def shown(client: ShoalClient) -> Any:
        try:
            return await client.request("GET", path)
        except ApiError as exc:
            raise no_workflow(exc, name) from exc

    flow = client_call(shown, server, token)
    console.print(f"[bold]{flow['name']}[/]: {flow['description']}", highlight=False)
    if flow.get("document"):
        console.print_json(data=flow["document"])


@workflows_app.command("add")
def workflows_add(
    path: Annotated[Path, typer.Argument(help="A workflow document (YAML).")],
    server: ServerOpt = None, token: TokenOpt = None,
) -> None:
    """Add a workflow of your own (only you see it); a new version needs a higher `version`."""
    text = _read(path)
    added = client_call(lambda c: c.request("POST", "/api/v1/workflows",
                                            json={"document": text}), server, token)
    console.print(f"Added {added['name']} v{added['version']}: submit it with shoal submit "
                  f"--workflow {added['name']} \"…\"", markup=False, highlight=False)


@workflows_app.command("remove")
def workflows_remove(name: str, server: ServerOpt = None, token: TokenOpt = None) -> None:
    """Remove a workflow of yours, every version (running tasks keep theirs)."""
    path = f"/api/v1/workflows/{urllib.parse.quote(name, safe='')}"

    async def removed(client: ShoalClient) -> None:
        try:
            await client.request("DELETE", path)
        except ApiError as exc:
            if exc.status == 404:
                raise NotFound(f"No workflow of yours is named {name!r}; `shoal workflows "
                               "list` lists yours.", code=exc.code) from exc
            raise

    client_call(removed, server, token)
    console.print(f"Removed {name}.", markup=False, highlight=False)


@workflows_app.command("check")
def workflows_check(
    path: Annotated[Path, typer.Argument(help="A workflow document (YAML).")],
) -> None:
    """Check a workflow document; names the file, line and field of what is wrong."""
    from shoal.workflows.loading import DocumentError, load_document

    text = _read(path)
    try:
        doc = load_document(text, source=str(path))
    except DocumentError as exc:
        err.print(exc.message, markup=False, highlight=False)
        raise typer.Exit(1) from None
    console.print(f"{path}: {doc.name} v{doc.version} is valid (steps: {len(doc.steps)}, "
                  f"roles: {len(doc.roles)}, parameters: {len(doc.parameters)}, "
                  f"loops: {len(doc.loops)}).", markup=False, highlight=False)


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        err.print(f"{path}: cannot be read ({exc.__class__.__name__}).")
        raise typer.Exit(2) from None
