"""What every `shoal` command shares: the consoles, settings from the environment, running an
async command with clear errors, and calling the API with the kept session."""

from __future__ import annotations

import asyncio
import os
import secrets
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar, cast

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.text import Text

from shoal.config import Settings
from shoal.errors import ShoalError

_loop_run: Callable[..., Any]
try:
    from uvloop import run as _loop_run
except ImportError:  # no uvloop (Windows): asyncio's own loop
    _loop_run = asyncio.run

console = Console()
err = Console(stderr=True)
T = TypeVar("T")


def settings_from_env(**overrides: Any) -> Settings:
    """Settings from the environment; a clear message (not a traceback) when they are wrong."""
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        first = exc.errors()[0]
        err.print(f"[red]Configuration error:[/] {first.get('msg')}")
        raise typer.Exit(2) from exc


def worker_settings() -> Settings:
    """A worker's settings: it signs and checks no tokens, so it needs no SHOAL_SECRET_KEY,
    in production too (one of its own stands in for the development default)."""
    unused = {} if os.environ.get("SHOAL_SECRET_KEY") else {"secret_key": secrets.token_urlsafe(32)}
    return settings_from_env(**unused)


def run(coro_fn: Callable[[], Awaitable[T]]) -> T:
    """Run an async command, on uvloop where it is installed (as uvicorn runs `shoal serve`,
    so that the embedded control plane of `shoal up` and the workers run on the same loop);
    Shoal errors become one red line and exit code 1."""
    import httpx

    try:
        return cast("T", _loop_run(coro_fn()))
    except ShoalError as exc:  # whole lines: a command in a message must stay one to copy
        err.print(Text(exc.message, style="red"), soft_wrap=True)
        for detail in exc.details if isinstance(exc.details, list) else []:
            if isinstance(detail, dict) and detail.get("message"):  # each field of a 422
                err.print(f"  {detail.get('field')}: {detail['message']}", markup=False,
                          highlight=False, soft_wrap=True)
        raise typer.Exit(1) from exc
    except httpx.TransportError as exc:
        where = exc.request.url if exc.request else "the server"
        err.print(f"[red]Cannot reach the control plane ({where}): {exc}. Is it running? "
                  "Start one with `shoal up`, or pass --server.[/]")
        raise typer.Exit(1) from exc
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


def client_call(fn: Callable[[Any], Awaitable[T]], server: str | None,
                token: str | None) -> T:
    """Call the API with the kept session (or the token given); errors as `run` shows them."""
    from shoal.cli.client import ApiError, ShoalClient, load_credentials
    from shoal.cli.credentials import CredentialStore
    from shoal.cli.refusals import refused_session

    store = CredentialStore()

    async def go() -> T:
        creds = await asyncio.to_thread(load_credentials, store, server, token)
        async with ShoalClient(creds, store=store) as client:
            try:
                return await fn(client)
            except ApiError as exc:
                raise refused_session(exc, creds.server) from exc

    return run(go)


ServerOpt = Annotated[str | None, typer.Option(
    help="Control plane URL (or SHOAL_URL; else the one signed in to last).")]
TokenOpt = Annotated[str | None, typer.Option(
    help="An access token (or SHOAL_TOKEN), instead of the session kept by `shoal login`.")]
TaskArg = Annotated[str, typer.Argument(
    metavar="TASK", help="The task's id, or its first 6 or more characters.")]
CheckpointArg = Annotated[str, typer.Argument(
    metavar="CHECKPOINT", help="The checkpoint's id, or its first 6 or more characters.")]
