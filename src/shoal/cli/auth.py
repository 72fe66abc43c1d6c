"""`shoal login`: sign in to a control plane and remember the session."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from shoal.cli.base import console, err, settings_from_env


def login(
    server: Annotated[str, typer.Option(help="Control plane URL.")],
    username: Annotated[str, typer.Option()],
    password: Annotated[str, typer.Option(prompt=True, hide_input=True)],
) -> None:
    """Sign in and remember the session for later commands."""
    import httpx

    from shoal.cli.client import save_credentials

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
