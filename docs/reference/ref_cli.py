"""The command-line page: every command of the `shoal` typer app, walked with click's own
introspection: its usage, its help, and each argument and option as `--help` shows it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import typer
from ref_text import GENERATED, code, table

from shoal.cli.app import app


def commands(group: Any, ctx: Any) -> Iterator[Any]:
    """A context for every command under `group`, depth first, in the order they were added.
    (Typer carries its own copy of click: its objects are used through click's API only.)"""
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if command is None or command.hidden:
            continue
        sub = command.context_class(command, info_name=name, parent=ctx)
        yield sub
        if hasattr(command, "list_commands"):
            yield from commands(command, sub)


def param_row(param: Any, ctx: Any) -> list[str]:
    names, text = param.get_help_record(ctx) or (param.name, "")
    return [code(names), text]


def section(ctx: Any) -> str:
    command, path = ctx.command, ctx.command_path
    usage = " ".join([path, *command.collect_usage_pieces(ctx)])
    text = f"## `{path}` {{#{path.replace(' ', '-')}}}\n\n```\n{usage}\n```\n\n"
    text += (command.help or "").strip() + "\n\n"
    params = [p for p in command.get_params(ctx) if p.name != "help" and not p.hidden]
    if params:
        rows = [param_row(p, ctx) for p in params]
        text += table(["Argument or option", "What it does"], rows) + "\n"
    return text


def page() -> str:
    root = typer.main.get_command(app)
    ctx = root.context_class(root, info_name="shoal")
    return (
        "# Command line\n\n" + GENERATED + "\n" + (root.help or "") + " Every command takes "
        "`--help`, which says what this page says; settings not given as options come from "
        "the environment ([settings](settings.md)).\n\n"
        + "".join(section(c) for c in commands(root, ctx)))
