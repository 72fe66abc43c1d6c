"""`shoal login` and `shoal logout`: sign in to a control plane, and forget the session."""

from __future__ import annotations

from typing import Annotated

import typer

from shoal.cli.base import console, err, run
from shoal.cli.client import chosen_server, sign_in
from shoal.cli.credentials import CredentialStore

ServerArg = Annotated[str | None, typer.Option(
    help="Control plane URL, e.g. http://127.0.0.1:8000 (or SHOAL_URL; else the one signed "
         "in to last).")]


def login(
    server: ServerArg = None,
    username: Annotated[str | None, typer.Option(help="Your username (asked if not given).")
                        ] = None,
    password: Annotated[str | None, typer.Option(
        help="Your password (asked, hidden, if not given).")] = None,
    token: Annotated[str | None, typer.Option(
        help="Sign in with a token instead: a login link's (shl_…, from `shoal up`), or an "
             "access token (kept as it is, not renewed).")] = None,
) -> None:
    """Sign in and keep the session for later commands, from any folder (the default server
    from now on)."""
    store = CredentialStore()
    url = chosen_server(server, store)
    if url is None:
        err.print("Which control plane? Give it: shoal login --server URL "
                  "(e.g. http://127.0.0.1:8000), or set SHOAL_URL.")
        raise typer.Exit(2)
    if token is None:
        username = username or typer.prompt("Username")
        password = password or typer.prompt("Password", hide_input=True)
    creds = run(lambda: sign_in(url, username=username, password=password, token=token))
    path = store.save(creds)
    console.print(f"Signed in to {url} as {creds.username}. The session is kept in {path} "
                  "(readable by you only); `shoal logout` forgets it.", soft_wrap=True,
                  markup=False, highlight=False)


def logout(server: ServerArg = None) -> None:
    """Forget the session kept for a control plane (by default the one signed in to last)."""
    store = CredentialStore()
    url = chosen_server(server, store)
    if url is None:
        console.print("Not signed in to any control plane.")
        return
    if store.forget(url):
        console.print(f"Signed out of {url}: its session is forgotten on this machine.",
                      markup=False, highlight=False)
    else:
        console.print(f"No session is kept for {url}.", markup=False, highlight=False)
