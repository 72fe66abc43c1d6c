"""The `shoal` command: up | serve | worker | submit | tasks | task | cancel | checkpoints |
checkpoint | approve | reject | correct | answer | workflows | user | token | db | backup |
restore | eval.

Each noun's commands live in a module of their own; this one puts them together."""

from __future__ import annotations

import signal

import typer

from shoal.cli import admin, auth, backup, checkpoints, servers, tasks, workers
from shoal.cli.evals import eval_app
from shoal.cli.workflows import workflows_app

app = typer.Typer(help="Shoal: plan a task into a graph of agents and run it on many machines.",
                  no_args_is_help=True, add_completion=False)
app.command()(servers.up)
app.command()(servers.serve)
app.command()(workers.worker)
app.command("mcp")(servers.mcp_server)
app.command("demo-model")(servers.demo_model)
app.command()(tasks.submit)
app.command()(tasks.tasks)
app.command()(tasks.cancel)
app.command("checkpoints")(checkpoints.checkpoints_list)
app.command()(checkpoints.approve)
app.command()(checkpoints.answer)
app.command()(checkpoints.reject)
app.command()(checkpoints.correct)
app.command()(auth.login)
app.command()(auth.logout)
app.add_typer(admin.user_app, name="user")
app.add_typer(admin.token_app, name="token")
app.add_typer(admin.db_app, name="db")
app.add_typer(tasks.task_app, name="task")
app.command("export")(tasks.export_account)
app.command("backup")(backup.backup)
app.command("restore")(backup.restore)
app.add_typer(checkpoints.checkpoint_app, name="checkpoint")
app.add_typer(workflows_app, name="workflows")
app.add_typer(eval_app, name="eval")


def main() -> None:
    """Entry point of the `shoal` command."""
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    app()
