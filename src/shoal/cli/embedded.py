"""`shoal up`: the whole system on one machine — SQLite, in-process bus, demo model, one worker."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import secrets
import signal
import socket
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from shoal import admin
from shoal.api.server import running_server
from shoal.auth.tokens import issue_token_pair
from shoal.cli.client import ShoalClient
from shoal.cli.credentials import Credentials, CredentialStore
from shoal.cli.follow import describe_reason, follow
from shoal.cli.outcome import show_ending
from shoal.config import DEV_SECRET, Settings
from shoal.demo.model import running_demo_model
from shoal.demo.samples import sample_answer, sample_sources
from shoal.runtime.core import Runtime
from shoal.store import accounts
from shoal.store.models import utcnow
from shoal.tools.registry import discover_tools
from shoal.tracing import configure
from shoal.worker.agent import Worker

REAL_MODEL_HINT = ("Connect a real model: SHOAL_OPENAI_COMPAT_BASE_URL=<OpenAI-compatible URL> "
                   "SHOAL_OPENAI_COMPAT_API_KEY=<key> SHOAL_OPENAI_COMPAT_MODEL=<model> shoal up")


def up_settings(settings: Settings) -> Settings:
    """`shoal up`'s settings: a secret key kept in the data folder (not the development one),
    and peer reviews on the one worker (another agent run there, not skipped)."""
    if settings.secret_key == DEV_SECRET:
        path = settings.data_dir / "secret_key"
        if not path.exists():
            settings.data_dir.mkdir(parents=True, exist_ok=True)
            path.touch(mode=0o600)
            path.write_text(secrets.token_urlsafe(48))
        settings = settings.model_copy(update={"secret_key": path.read_text().strip()})
    if "SHOAL_REVIEW_WITHOUT_PEER" not in os.environ:
        settings = settings.model_copy(update={"review_without_peer": "same_worker"})
    return settings


@dataclass(frozen=True, slots=True)
class Embedded:
    """A whole Shoal running in this process: its URL, a session of its admin, the model its
    worker uses, and the settings it runs with."""

    url: str
    creds: Credentials
    login_link: str
    model_label: str
    settings: Settings


@contextlib.asynccontextmanager
async def embedded_shoal(settings: Settings, *, slots: int = 2, sock: socket.socket | None = None,
                         stop: asyncio.Event | None = None,
                         keep_session: bool = True) -> AsyncIterator[Embedded]:
    """Run the control plane (on `sock`, bound already, else on `settings.port`), the demo
    model unless a model is configured, and one local worker of `slots` slots; yield once the
    worker has joined (or `stop` is set). With `keep_session` the admin's session is kept in
    the user's config directory, so `shoal` commands reach this server from any folder."""
    async with contextlib.AsyncExitStack() as stack:
        model_label = f"{settings.openai_compat_model} at {settings.openai_compat_base_url}"
        if not settings.openai_compat_base_url:
            url = await stack.enter_async_context(running_demo_model())
            settings = settings.model_copy(update={"openai_compat_base_url": url,
                                                   "openai_compat_model": "shoal-demo"})
            model_label = f"DEMO model (scripted answers, not a real model) at {url}"
            stack.callback(_unset, _literature_env(url.removesuffix("/v1")))
        # Ready (`/readyz`) once the local worker has joined, so a script that waits for it
        # can submit at once.
        settings = settings.model_copy(update={"ready_workers": max(1, settings.ready_workers)})
        srv = await stack.enter_async_context(running_server(settings, port=settings.port,
                                                             sock=sock))
        token, link, creds = await _bootstrap(srv.services.db, settings, srv.url,
                                              keep_session=keep_session)
        tools = await discover_tools(settings)
        tracing = configure("shoal-worker")  # None unless OTEL_EXPORTER_OTLP_ENDPOINT is set
        if tracing is not None:
            stack.push_async_callback(tracing.close)
        worker = Worker(srv.url, token, settings, tools=tools, name="local", slots=slots,
                        tracing=tracing)
        async with asyncio.TaskGroup() as tg:
            tg.create_task(worker.run())
            await _until_registered(srv.services.runtime, stop or asyncio.Event())
            try:
                yield Embedded(srv.url, creds, link, model_label, settings)
            finally:
                worker.stop()


async def run_embedded(
    settings: Settings, *, console: Console, demo_task: Mapping[str, str] | None = None,
    slots: int = 2, sock: socket.socket | None = None,
) -> int:
    """Run until Ctrl-C/SIGTERM (or, with `demo_task`, until that task ends); exit code. The
    control plane listens on `sock` (bound already), else on `settings.port`."""
    stop = asyncio.Event()
    _on_signals(stop.set)
    async with embedded_shoal(settings, slots=slots, sock=sock, stop=stop) as shoal:
        _banner(console, shoal.url, shoal.login_link, shoal.model_label, settings.data_dir)
        code = 0
        if demo_task is not None:
            code = await _demo(shoal.settings, shoal.creds, console, demo_task, stop)
        else:
            await stop.wait()
        console.print("Stopping…")
    return code


def _literature_env(root: str) -> list[str]:
    """Point the bundled `shoal mcp literature` at the demo server's fake arXiv and Crossref
    (mounted at `<root>/literature`), without spacing its requests; a variable already set is
    kept. The names it set, to unset when the demo model stops."""
    wanted = {"SHOAL_LITERATURE_ARXIV_URL": f"{root}/literature/arxiv/api/query",
              "SHOAL_LITERATURE_CROSSREF_URL": f"{root}/literature/crossref",
              "SHOAL_LITERATURE_INTERVAL": "0"}
    set_here = [name for name in wanted if name not in os.environ]
    for name in set_here:
        os.environ[name] = wanted[name]
    return set_here


def _unset(names: list[str]) -> None:
    for name in names:
        os.environ.pop(name, None)


async def _bootstrap(db: object, settings: Settings, url: str, *,
                     keep_session: bool) -> tuple[str, str, Credentials]:
    """The admin account, a token for the local worker, a login link, and the CLI's session
    (with `keep_session`, kept in the user's config directory, so `shoal` commands work from
    any folder)."""
    admin_id = await admin.ensure_user(db, settings, username="admin",  # type: ignore[arg-type]
                                       password=secrets.token_urlsafe(18), admin=True)
    token = await admin.create_worker_token(db, name="local")  # type: ignore[arg-type]
    login = await admin.create_login_link_token(db, user_id=admin_id)  # type: ignore[arg-type]
    pair = issue_token_pair(admin_id, username="admin", is_admin=True, settings=settings)
    assert pair.refresh_expires_at is not None
    async with db.begin() as conn:  # type: ignore[attr-defined]
        await accounts.start_refresh_family(conn, user_id=admin_id, jti=pair.refresh_jti,
                                            expires_at=pair.refresh_expires_at, now=utcnow())
    creds = Credentials(server=url, token=pair.access_token, refresh_token=pair.refresh_token,
                        username="admin")
    if keep_session:
        await asyncio.to_thread(CredentialStore().save, creds)
    return token, f"{url}/login?token={login}", creds


def _on_signals(callback: object) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, callback)  # type: ignore[arg-type]


async def _until_registered(runtime: Runtime, stop: asyncio.Event) -> None:
    joined = asyncio.ensure_future(runtime.fleet.joined.wait())
    stopped = asyncio.ensure_future(stop.wait())
    await asyncio.wait({joined, stopped}, return_when=asyncio.FIRST_COMPLETED)
    joined.cancel()
    stopped.cancel()


def _banner(console: Console, url: str, link: str, model: str, data_dir: Path) -> None:
    # soft_wrap: a link or a command broken across lines could not be copied or clicked
    say = functools.partial(console.print, soft_wrap=True)
    say(f"[bold green]Shoal is running[/] at {url}  (data: {data_dir.resolve()})")
    say(f"Open this one-time login link: [bold]{link}[/]")
    say(f"Model: {model}")
    if "DEMO" in model:
        say(f"[dim]{REAL_MODEL_HINT}[/]")
    say("This machine is signed in as admin: `shoal` commands reach this server from any "
        "folder.")
    say('Submit work from another terminal: shoal submit "…" --follow   Stop with Ctrl-C.')


async def _demo(settings: Settings, creds: Credentials, console: Console,
                sample: Mapping[str, str], stop: asyncio.Event) -> int:
    async with ShoalClient(creds) as client:
        sources = sample_sources(sample["workflow"])
        created = await submit_sample(client, sample, sources)
        task_id = created["task_id"]
        console.print(f"Submitted sample task {task_id} ({sample['workflow']} workflow): "
                      f"{sample['description']!r}", soft_wrap=True)
        if sources:
            console.print(f"It reads {len(sources)} uploaded sources, a fictional sample corpus: "
                          f"{', '.join(p.name for p in sources)}", soft_wrap=True)
        answered: list[str] = []  # the answers the demo gave this task's questions
        follower = asyncio.create_task(follow(
            client, task_id, console, on_checkpoint=functools.partial(
                _auto_approve, client, console, sample["workflow"], answered)))
        stopper = asyncio.create_task(stop.wait())
        done, _ = await asyncio.wait({follower, stopper}, return_when=asyncio.FIRST_COMPLETED)
        for t in (follower, stopper):
            t.cancel()
        if follower not in done:
            return 130
        follower.result()
        return await show_ending(client, console, task_id,
                                 results=settings.data_dir / "results")


async def submit_sample(client: ShoalClient, sample: Mapping[str, str],
                        sources: Sequence[Path] = ()) -> dict[str, Any]:
    """Submit `sample` (its description and workflow); with `sources`, upload them first
    and have the task read them. The server's answer (`task_id`…)."""
    created, _ = await client.submit_reading(dict(sample), sources)
    return created


async def _auto_approve(client: ShoalClient, console: Console, workflow: str,
                        answered: list[str], checkpoint: dict[str, Any]) -> None:
    """The demo runs unattended: answer each question with the sample's next answer
    (`sample_answer`, kept in `answered`) and approve every other checkpoint, saying how a
    person would decide."""
    cid = checkpoint["checkpoint_id"]
    if checkpoint.get("reason") == "question":
        reply = sample_answer(workflow, len(answered))
        console.print(f"[yellow]Question {cid}: {escape(checkpoint.get('question') or '')}"
                      f"[/]\n[yellow]The demo answers: {escape(repr(reply))}.[/] In real use "
                      "you answer: "
                      f"shoal answer {cid} \"…\" (or interactively in shoal submit --follow)",
                      soft_wrap=True, highlight=False)
        await client.request("POST", f"/api/v1/checkpoints/{cid}/answer",
                             json={"answer": reply})
        answered.append(reply)
        return
    console.print(f"[yellow]Checkpoint {cid} ({describe_reason(checkpoint['reason'])}): the demo "
                  f"approves it automatically.[/] In real use you decide: shoal approve {cid} | "
                  f"shoal reject {cid} --reason … | shoal correct {cid} --type … --guidance …",
                  soft_wrap=True, highlight=False)
    await client.approve(cid)
