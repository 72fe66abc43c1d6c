"""Real Shoal processes for end-to-end tests: start them, wait for them, kill them, show output.

A `Cluster` owns every process one test starts. Each process gets its own data directory, its
own process group and a log file; `close()` kills every group and prints the tail of each log
(pytest shows it only when the test fails). Waiting is always a condition polled against a
deadline, never a fixed sleep.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
from websockets.asyncio.client import ClientConnection, connect

SHOAL = str(Path(sys.executable).with_name("shoal"))
SECRET = "e2e-secret-key-" + "k" * 40
PASSWORD = "password123"
CLI_SECONDS = 60  # an admin command that takes longer has hung
LOG_TAIL = 120  # lines of each process's output shown when a test fails
ACTIVE: list[Cluster] = []  # clusters alive now, so a failing test can show their output
T = TypeVar("T")
PR_SET_PDEATHSIG = 1  # prctl option: the signal a child gets when its parent thread exits

FAST_TIMINGS = {
    "SHOAL_MODE": "dev",
    "SHOAL_SECRET_KEY": SECRET,
    "SHOAL_HEARTBEAT_INTERVAL": "0.5",
    "SHOAL_LEASE_SECONDS": "3",
    "SHOAL_SWEEP_INTERVAL": "0.2",
    "SHOAL_RETRY_DELAYS": "[0.2,0.2,0.2]",
    "SHOAL_BCRYPT_ROUNDS": "4",
}


def free_port() -> int:
    """A TCP port nobody listens on right now (bind port 0 and let the kernel choose)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass(slots=True)
class Proc:
    """One child process in its own process group, its output going to `log`."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    data_dir: Path

    @property
    def pid(self) -> int:
        """The process id (also its process group id)."""
        return self.popen.pid

    def alive(self) -> bool:
        """Whether the process is still running."""
        return self.popen.poll() is None

    async def kill(self) -> None:
        """SIGKILL the whole process group and reap the process."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        await asyncio.to_thread(self.popen.wait, 10)

    def output(self) -> str:
        """Everything the process printed so far."""
        return self.log.read_text(errors="replace") if self.log.exists() else ""


@dataclass
class Cluster:
    """The processes of one test, sharing one database and one secret key."""

    root: Path
    database_url: str
    procs: list[Proc] = field(default_factory=list)

    def env(self, data_dir: Path, **extra: str) -> dict[str, str]:
        """A clean environment: no inherited SHOAL_* variables, fast timings, own data dir,
        and the cluster's own config directory (where `shoal up` and `login` keep sessions)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("SHOAL_")}
        env.update(FAST_TIMINGS, SHOAL_DATA_DIR=str(data_dir),
                   XDG_CONFIG_HOME=str(self.root / "config"), **extra)
        return env

    def server_env(self) -> dict[str, str]:
        """The environment of server-side commands: the shared database."""
        return self.env(self.root / "server", SHOAL_DATABASE_URL=self.database_url)

    async def cli(self, *args: str) -> str:
        """Run `shoal ARGS` against the shared database; its stdout, or fail with its output."""

        def go() -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [SHOAL, *args],
                env=self.server_env(),
                cwd=self.root,
                capture_output=True,
                text=True,
                timeout=CLI_SECONDS,
                check=False,
            )

        done = await asyncio.to_thread(go)
        if done.returncode != 0:
            raise AssertionError(
                f"shoal {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
            )
        return done.stdout

    async def create_user(self, username: str, *, admin: bool = False) -> None:
        """`shoal user create` (the first call also migrates the database)."""
        await self.cli(
            "user",
            "create",
            "--username",
            username,
            "--password",
            PASSWORD,
            *(["--admin"] if admin else []),
        )

    async def create_worker_token(self, name: str) -> str:
        """`shoal token create --worker NAME`: the token it prints."""
        return (await self.cli("token", "create", "--worker", name)).strip()

    def start(self, name: str, args: list[str], env: dict[str, str], data_dir: Path, *,
              prefix: Sequence[str] = ()) -> Proc:
        """Start `shoal ARGS` (after `prefix`, e.g. `ip netns exec NS`) in a new process group
        with its output in a log file."""
        data_dir.mkdir(parents=True, exist_ok=True)
        log = self.root / f"{name}.log"
        with log.open("ab") as out:
            popen = subprocess.Popen(
                [*prefix, SHOAL, *args],
                env=env,
                cwd=data_dir,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        proc = Proc(name=name, popen=popen, log=log, data_dir=data_dir)
        self.procs.append(proc)
        return proc

    def start_server(self, port: int, *, name: str = "server") -> Proc:
        """`shoal serve` on `port` against the shared database."""
        return self.start(
            name, ["serve", "--port", str(port)], self.server_env(), self.root / "server"
        )

    def start_worker(
        self,
        name: str,
        token: str,
        server_url: str,
        *,
        slots: int = 1,
        model_url: str | None = None,
        env: dict[str, str] | None = None,
    ) -> Proc:
        """`shoal worker` with its own data directory (outbox and machine id live there) and
        `env` added to its environment."""
        data_dir = self.root / f"worker-{name}"
        extra = {"SHOAL_OPENAI_COMPAT_BASE_URL": model_url} if model_url else {}
        extra |= env or {}
        if model_url:  # the demo server's fake arXiv and Crossref, for `shoal mcp literature`
            root = model_url.removesuffix("/v1") + "/literature"
            extra |= {"SHOAL_LITERATURE_ARXIV_URL": f"{root}/arxiv/api/query",
                      "SHOAL_LITERATURE_CROSSREF_URL": f"{root}/crossref",
                      "SHOAL_LITERATURE_INTERVAL": "0", "SHOAL_LITERATURE_RETRY_BASE": "0"}
        return self.start(
            f"worker-{name}",
            [
                "worker",
                "--server",
                server_url,
                "--token",
                token,
                "--name",
                name,
                "--slots",
                str(slots),
            ],
            self.env(data_dir, **extra),
            data_dir,
        )

    def start_demo_model(self, port: int) -> Proc:
        """`shoal demo-model` on `port`."""
        data_dir = self.root / "demo-model"
        return self.start(
            "demo-model", ["demo-model", "--port", str(port)], self.env(data_dir), data_dir
        )

    async def close(self) -> None:
        """Kill every process this cluster started, then print the end of each one's output."""
        for proc in self.procs:
            await proc.kill()
        self.print_logs()

    def print_logs(self) -> None:
        """Print the last lines of every process's output (pytest shows them on failure)."""
        for proc in self.procs:
            lines = proc.output().splitlines()[-LOG_TAIL:]
            print(f"\n===== {proc.name} (pid {proc.pid}, exit {proc.popen.poll()}) =====")
            print("\n".join(lines))


def _die_with_parent() -> None:
    """In the child: get SIGKILL if the test process dies without tearing down (Linux)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


@contextlib.asynccontextmanager
async def cluster(root: Path, database_url: str | None = None) -> AsyncIterator[Cluster]:
    """A `Cluster` under `root` (SQLite in `root` unless a URL is given); killed on exit."""
    url = database_url or f"sqlite+aiosqlite:///{root / 'shoal.db'}"
    group = Cluster(root=root, database_url=url)
    ACTIVE.append(group)
    try:
        yield group
    finally:
        ACTIVE.remove(group)
        await group.close()


# ---- waiting ----------------------------------------------------------------------------------


async def wait_for(
    check: Callable[[], Awaitable[T | None]],
    *,
    within: float,
    what: str,
    procs: list[Proc] | None = None,
) -> T:
    """Poll `check` until it returns something truthy; fail after `within` seconds.

    Fails early, naming the process, when one of `procs` has exited.
    """
    deadline = time.monotonic() + within
    while True:
        value = await check()
        if value:
            return value
        for proc in procs or ():
            if not proc.alive():
                raise AssertionError(
                    f"{proc.name} exited ({proc.popen.returncode}) while waiting for {what}"
                )
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within:g} s waiting for {what}")
        await asyncio.sleep(0.1)


async def wait_healthy(url: str, proc: Proc, *, within: float = 40) -> None:
    """Wait until the control plane at `url` answers /healthz."""
    async with httpx.AsyncClient(base_url=url, timeout=2) as client:

        async def up() -> bool:
            try:
                return (await client.get("/healthz")).status_code == 200
            except httpx.TransportError:
                return False

        await wait_for(up, within=within, what=f"{proc.name} at {url}", procs=[proc])


async def wait_port(port: int, proc: Proc, *, within: float = 30) -> None:
    """Wait until something listens on `port` (for servers without /healthz)."""

    async def listening() -> bool:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            return False
        writer.close()
        await writer.wait_closed()
        return True

    await wait_for(listening, within=within, what=f"{proc.name} on port {port}", procs=[proc])


# ---- the API as a signed-in user ----------------------------------------------------------------


@contextlib.asynccontextmanager
async def signed_in(url: str, username: str) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client signed in as `username`, closed on exit."""
    async with httpx.AsyncClient(base_url=url, timeout=15) as client:
        client.headers["Authorization"] = f"Bearer {await access_token(client, username)}"
        yield client


async def access_token(client: httpx.AsyncClient, username: str) -> str:
    """Sign in as `username`; the access token."""
    resp = await client.post(
        "/api/v1/auth/login", json={"username": username, "password": PASSWORD}
    )
    assert resp.status_code == 200, resp.text
    token: str = resp.json()["access_token"]
    return token


async def api_worker_tokens(url: str, admin: str, names: Sequence[str]) -> list[str]:
    """Worker tokens made over the API by the admin `admin` (a `shoal token create` costs a
    second and a half of start-up each)."""
    async with signed_in(url, admin) as client:
        tokens = []
        for name in names:
            resp = await client.post("/api/v1/workers/tokens", json={"name": name})
            assert resp.status_code == 201, resp.text
            tokens.append(resp.json()["token"])
        return tokens


async def wait_workers_online(
    client: httpx.AsyncClient, names: set[str], procs: list[Proc], *, within: float = 30
) -> dict[str, str]:
    """Wait until every worker named is connected; returns {name: worker_id}."""

    async def online() -> dict[str, str] | None:
        workers = (await client.get("/api/v1/workers")).json()["workers"]
        live = {
            w["machine_name"]: w["worker_id"] for w in workers if w["status"] in ("online", "busy")
        }
        return live if names <= set(live) else None

    found = await wait_for(
        online, within=within, what=f"workers {sorted(names)} online", procs=procs
    )
    return {n: found[n] for n in names}


async def submit(client: httpx.AsyncClient, body: dict[str, Any]) -> str:
    """Submit a task; its id."""
    resp = await client.post("/api/v1/tasks", json=body)
    assert resp.status_code == 201, resp.text
    task_id: str = resp.json()["task_id"]
    return task_id


async def wait_task(
    client: httpx.AsyncClient,
    task_id: str,
    *,
    until: Callable[[dict[str, Any]], bool],
    within: float,
    what: str,
    procs: list[Proc] | None = None,
) -> dict[str, Any]:
    """Poll GET /api/v1/tasks/{id} until `until(detail)` holds; the detail."""

    async def check() -> dict[str, Any] | None:
        detail: dict[str, Any] = (await client.get(f"/api/v1/tasks/{task_id}")).json()
        return detail if until(detail) else None

    return await wait_for(check, within=within, what=what, procs=procs)


def finished(detail: dict[str, Any]) -> bool:
    """Whether a task detail is in an end state."""
    return detail["status"] in ("completed", "failed", "cancelled", "budget_exceeded")


async def sse_events(
    client: httpx.AsyncClient,
    task_id: str,
    *,
    until: set[str],
    last_event_id: int = 0,
    within: float = 30,
) -> list[dict[str, Any]]:
    """Read a task's SSE stream from `last_event_id` until an event whose type is in `until`."""
    seen: list[dict[str, Any]] = []
    headers = {"Last-Event-ID": str(last_event_id)}
    async with asyncio.timeout(within):
        async with client.stream("GET", f"/api/v1/tasks/{task_id}/events", headers=headers) as resp:
            assert resp.status_code == 200
            async for line in resp.aiter_lines():
                if line.startswith("data: "):
                    seen.append(json.loads(line[6:]))
                    if seen[-1]["type"] in until:
                        return seen
    raise AssertionError(f"SSE stream ended before any of {sorted(until)}: {seen[-3:]}")


def worker_socket(url: str, token: str) -> Any:
    """Open `/ws/worker` as a worker would (an async context manager)."""
    ws_url = url.replace("http://", "ws://") + "/ws/worker"
    return connect(ws_url, additional_headers={"Authorization": f"Bearer {token}"}, open_timeout=10)


async def receive_until(
    ws: ClientConnection, accept: Callable[[dict[str, Any]], bool], *, within: float = 15
) -> dict[str, Any]:
    """Read JSON messages until one satisfies `accept`; that message."""
    async with asyncio.timeout(within):
        while True:
            message: dict[str, Any] = json.loads(await ws.recv())
            if accept(message):
                return message
