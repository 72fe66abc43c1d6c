"""The fault matrix: one fault each, injected while 30-subtask graphs run on real processes.

Each scenario starts `shoal serve` and two workers (`shoal worker`, echo tool, three slots each)
as processes, submits `Size.tasks` graphs of 30 subtasks (5 layers of 6, each step after two of
the layer before, each writing a file), follows every task with a client WebSocket that
reconnects with `since` whenever its connection drops, injects its fault once a fifth of the
first graph is done, and waits for every task to end. The `Report` counts what a user would
care about: tasks finished, steps lost (not completed), steps completed twice (more than one
accepted result), and events the reconnecting client missed or got twice, against the store's
own log. `tests/faults/test_matrix.py` asserts zero in every cell at a reduced size;
`benchmarks/faults.py` prints the table at full size.

Faults that need the machine's privileges (a network namespace, a tmpfs, restarting PostgreSQL
or Redis) run as root only, which CI is here.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from tests.conftest import POSTGRES_URL, REDIS_URL, drop_postgres, fresh_postgres
from tests.e2e.procs import (
    Cluster,
    Proc,
    api_worker_tokens,
    cluster,
    finished,
    free_port,
    signed_in,
    wait_for,
    wait_healthy,
    wait_port,
)

END = ("task_complete", "task_failed", "task_cancelled")
SLOW = "[demo:slow=0.4]"  # every answer of the demo model takes 0.4 s: the fault lands mid-way
WORKFLOWS = (  # a loop (write, review, write again) and a route (the supervisor's hops)
    {"workflow": "pipeline", "description": f"Cats in cities {SLOW}"},
    {"workflow": "supervisor", "description": "Find an Indian restaurant near Taipei 101 and "
                                              f"reserve a table for tomorrow at 7 PM {SLOW}"},
)
HANGING_CLI = ({  # the Codex CLI's model stalls on the first attempt; the time-out stops it
    "description": "A step whose CLI hangs once", "plan": [{
        "name": "hang", "description": "Write a.py: print('x') [demo:stall,times=1,shared=1]",
        "tool": "codex", "options": {"timeout": 6}}]},)
BAD_PLANS = tuple(  # the planner's answer is not JSON, a cycle, or no step at all
    {"description": f"Write a haiku about rivers, then print it [demo:{kind}-plan]",
     "tool_preferences": ["openai_compat"]}
    for kind in ("invalid", "cyclic", "empty"))


@dataclass(frozen=True)
class Size:
    """How much runs while the fault hits."""

    tasks: int = 1
    delay: float = 0.3  # seconds each step takes
    layers: int = 5
    width: int = 6

    @property
    def subtasks(self) -> int:
        return self.layers * self.width


REDUCED = Size()
FULL = Size(tasks=3, delay=0.5)


@dataclass
class Report:
    """What one fault did to the work in flight."""

    fault: str
    database: str
    tasks: int = 0
    finished: int = 0
    completed: int = 0
    lost: int = 0
    twice: int = 0
    events_lost: int = 0
    events_twice: int = 0
    retried: int = 0  # attempts that did not succeed (expired, failed): the fault's mark
    tracebacks: int = 0  # in the control plane's log (a user never sees one, nor does a log)
    plan_sources: list[str] = field(default_factory=list)  # where planned tasks' plans came from
    processes_left: int = 0  # a CLI's processes still running after its task ended
    seconds: float = 0.0
    note: str = ""

    @property
    def clean(self) -> bool:
        """Every task ended, nothing lost, nothing twice."""
        return (self.finished == self.tasks and not self.lost and not self.twice
                and not self.events_lost and not self.events_twice and not self.tracebacks
                and not self.processes_left)


@dataclass
class Run:
    """The processes and clients of one scenario."""

    cluster: Cluster
    size: Size
    port: int
    database: str
    env: dict[str, str]
    server: Proc | None = None
    workers: list[Proc] = field(default_factory=list)
    followers: list[Follower] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    server_host: str = "127.0.0.1"
    link: str = ""  # the host side of the namespaced worker's link (`network_cut`)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start_server(self, name: str = "server") -> Proc:
        env = {**self.cluster.server_env(), **self.env}
        self.server = self.cluster.start(name, ["serve", "--host", self.server_host, "--port",
                                                str(self.port)], env, self.cluster.root / "server")
        return self.server

    def alive(self) -> list[Proc]:
        """The processes running now (one that dies later fails the wait it is passed to)."""
        return [p for p in self.cluster.procs if p.alive()]


# ---- following a task as a client that reconnects ----------------------------------------------


@dataclass
class Follower:
    """A client WebSocket on one task that reconnects with `since` after every drop."""

    ws_url: str
    task_id: str
    seen: list[dict[str, Any]] = field(default_factory=list)
    drops: int = 0  # connections that ended before the task did (and failed attempts to open)
    socket: Any = None

    async def run(self) -> None:
        while not (self.seen and self.seen[-1]["type"] in END):
            since = self.seen[-1]["seq"] if self.seen else 0  # the last stored event seen
            try:
                async with connect(self.ws_url, open_timeout=5) as ws:
                    self.socket = ws
                    await ws.send(json.dumps({"type": "subscribe", "task_id": self.task_id,
                                              "since": since}))
                    async for raw in ws:
                        frame = json.loads(raw)
                        for item in frame["items"] if frame["type"] == "batch" else [frame]:
                            if item.get("seq") and item["data"].get("task_id") == self.task_id:
                                self.seen.append(item)  # stored events (live tokens have none)
                        if self.seen and self.seen[-1]["type"] in END:
                            return
            except (ConnectionClosed, OSError, InvalidStatus, TimeoutError):
                pass
            self.socket = None
            self.drops += 1
            await asyncio.sleep(0.2)  # the server is restarting: try again shortly

    async def drop(self) -> None:
        """Break the connection the way a network failure does (no close handshake)."""
        if self.socket is not None:
            self.socket.transport.abort()


# ---- the graph and the accounting --------------------------------------------------------------


def graph(size: Size, tag: str) -> list[dict[str, Any]]:
    """`size.layers` layers of `size.width` steps, each after two of the layer before."""
    w = size.width
    return [{"name": f"s{layer}_{i}", "description": f"Step {i} of layer {layer} ({tag}).",
             "tool": "echo",
             "options": {"delay": size.delay,
                         "files": {f"out/{layer}_{i}.txt": f"{tag}: step {i} of layer {layer}\n"}},
             "dependencies": [f"s{layer - 1}_{i}", f"s{layer - 1}_{(i + 1) % w}"]
             if layer else []}
            for layer in range(size.layers) for i in range(w)]


async def account(client: httpx.AsyncClient, report: Report, task_ids: list[str],
                  followers: list[Follower]) -> None:
    """Fill `report` from the store: tasks ended, steps lost or twice, events missed."""
    for task_id, follower in zip(task_ids, followers, strict=True):
        detail = (await client.get(f"/api/v1/tasks/{task_id}")).json()
        report.finished += finished(detail)
        report.completed += detail["status"] == "completed"
        spans = (await client.get(f"/api/v1/tasks/{task_id}/attempts")).json()["attempts"]
        done: dict[str, int] = {}
        for span in spans:
            if span["status"] == "succeeded":
                done[span["subtask_id"]] = done.get(span["subtask_id"], 0) + 1
        report.lost += sum(s["status"] not in ("completed", "skipped")
                           for s in detail["subtasks"])
        report.twice += sum(n - 1 for n in done.values())
        report.retried += sum(span["status"] != "succeeded" for span in spans)
        whole = await stored_events(client, task_id)
        seen = [e["seq"] for e in follower.seen]
        report.events_lost += len(set(whole) - set(seen))
        report.events_twice += len(seen) - len(set(seen))


async def stored_events(client: httpx.AsyncClient, task_id: str) -> list[int]:
    """The sequence numbers of a task's events in the store (its SSE stream from the start)."""
    seqs: list[int] = []
    async with asyncio.timeout(30), client.stream(
            "GET", f"/api/v1/tasks/{task_id}/events", headers={"Last-Event-ID": "0"}) as resp:
        async for line in resp.aiter_lines():
            if line.startswith("data: "):
                event = json.loads(line[6:])
                seqs.append(event["seq"])
                if event["type"] in END:
                    return seqs
    return seqs


# ---- the scenario runner -----------------------------------------------------------------------


Inject = Callable[[Run], Awaitable[None]]


@dataclass(frozen=True)
class Fault:
    """One row of the matrix."""

    name: str
    inject: Inject
    database: str = "sqlite"
    redis: bool = False
    privileged: bool = False  # needs root (namespaces, mounts, restarting services)
    workflows: tuple[dict[str, Any], ...] = ()  # tasks of the demo model's, beside the graphs
    clis: bool = False  # the workers run the vendors' CLIs (`make clis`) against the demo model
    prepare: Callable[[Run], contextlib.AbstractAsyncContextManager[None]] | None = None


async def run_fault(fault: Fault, root: Path, size: Size = REDUCED) -> Report:
    """Run one scenario under `root`; its report."""
    report = Report(fault.name, fault.database, tasks=size.tasks)
    db_url = await fresh_postgres(POSTGRES_URL) if fault.database == "postgres" else None
    started = time.monotonic()
    try:
        async with cluster(root, db_url) as c:
            # Retries a second or more apart, as in production (10, 30, 60 s) they are minutes
            # apart: at 0.2 s, a worker cut off for a lease and TCP's retransmission backoff
            # (4 s became 6.5) got its own retries and expired them all, failing the task.
            env = {"SHOAL_LEASE_SECONDS": "3", "SHOAL_RETRY_DELAYS": "[1,2,3]"}
            if fault.redis:
                env |= {"SHOAL_REDIS_URL": REDIS_URL,
                        "SHOAL_REDIS_NAMESPACE": f"shoal-fault-{uuid.uuid4().hex[:8]}"}
            run = Run(c, size, free_port(), fault.database, env)
            async with contextlib.AsyncExitStack() as stack:
                if fault.prepare is not None:
                    await stack.enter_async_context(fault.prepare(run))
                await _drive(run, fault, report)
                report.tracebacks = sum(p.output().count("Traceback") for p in c.procs
                                        if p.name.startswith("server"))
            report.note = "; ".join(run.notes)
    finally:
        report.seconds = time.monotonic() - started
        if db_url is not None:
            await drop_postgres(db_url, POSTGRES_URL)
    return report


async def _drive(run: Run, fault: Fault, report: Report) -> None:
    c = run.cluster
    await c.create_user("alice", admin=True)
    server = run.start_server()
    model_url = None
    if fault.workflows:  # the demo model plays their roles
        model_port = free_port()
        model = c.start_demo_model(model_port)
        await wait_port(model_port, model)
        model_url = f"http://127.0.0.1:{model_port}/v1"
    await wait_healthy(run.url, server)
    tokens = await api_worker_tokens(run.url, "alice", ["w0", "w1"])
    env = cli_env(model_url) if fault.clis and model_url else {}
    for i, token in enumerate(tokens):
        run.workers.append(c.start_worker(f"w{i}", token, run.url, slots=3,
                                          model_url=model_url, env=env))
    async with signed_in(run.url, "alice") as client:
        await _workers_connected(client, run)
        token = client.headers["Authorization"].removeprefix("Bearer ")
        task_ids = []
        for n in range(run.size.tasks):
            created = await client.post("/api/v1/tasks", json={
                "description": f"Graph {n} under {fault.name}", "plan": graph(run.size, f"g{n}")})
            assert created.status_code == 201, created.text
            task_ids.append(created.json()["task_id"])
        if fault.workflows:
            report.tasks += len(fault.workflows)
            for body in fault.workflows:
                created = await client.post("/api/v1/tasks", json=body)
                assert created.status_code == 201, created.text
                task_ids.append(created.json()["task_id"])
        ws = f"ws://127.0.0.1:{run.port}/ws?token={token}"
        run.followers = [Follower(ws, t) for t in task_ids]
        following = [asyncio.create_task(f.run()) for f in run.followers]
        try:
            await wait_for(lambda: _done_at_least(client, task_ids[0], run.size.subtasks // 5),
                           within=60, what="a fifth of the first graph done", procs=run.alive())
            await fault.inject(run)
            for task_id in task_ids:
                await wait_for(lambda t=task_id: _ended(client, t), within=120,
                               what=f"task {task_id} to end", procs=run.alive())
            async with asyncio.timeout(60):
                await asyncio.gather(*following)
        finally:
            for f in following:
                f.cancel()
        await account(client, report, task_ids, run.followers)
        report.plan_sources = [e["data"]["plan_source"] for f in run.followers for e in f.seen
                               if e["type"] == "task_update"
                               and e["data"].get("plan_source") not in (None, "user")]
        if fault.workflows is BAD_PLANS:
            run.notes.append(f"plans used: {', '.join(report.plan_sources)}")
        if fault.clis:
            report.processes_left = len(cli_processes(c.root))
        if any(f.drops for f in run.followers):
            run.notes.append(f"client reconnects: {sum(f.drops for f in run.followers)}")


async def _workers_connected(client: httpx.AsyncClient, run: Run) -> None:
    async def online() -> bool:
        try:
            workers = (await client.get("/api/v1/workers")).json()["workers"]
        except httpx.TransportError:
            return False
        return sum(w["status"] in ("online", "busy") for w in workers) >= len(run.workers)

    await wait_for(online, within=40, what="the workers online", procs=run.alive())


async def _done_at_least(client: httpx.AsyncClient, task_id: str, n: int) -> bool:
    detail = (await client.get(f"/api/v1/tasks/{task_id}")).json()
    return sum(s["status"] == "completed" for s in detail["subtasks"]) >= n


async def _ended(client: httpx.AsyncClient, task_id: str) -> bool:
    try:
        return finished((await client.get(f"/api/v1/tasks/{task_id}")).json())
    except (httpx.TransportError, json.JSONDecodeError, KeyError):
        return False  # the server is restarting


# ---- the faults --------------------------------------------------------------------------------


async def no_fault(run: Run) -> None:
    """Nothing more: the fault is in the tasks (what the planner answers)."""


async def worker_kill(run: Run) -> None:
    """kill -9 of a worker: its attempts' leases run out and they run on the other."""
    await run.workers[0].kill()


async def expired_result(run: Run) -> None:
    """A worker frozen (SIGSTOP) past its lease, then thawed: the results it then sends belong
    to expired attempts and must be refused, their steps run once elsewhere."""
    pid = run.workers[0].pid
    os.killpg(pid, signal.SIGSTOP)
    try:
        await asyncio.sleep(5.0)  # the lease is 3 s: the fault is the wait itself
    finally:
        os.killpg(pid, signal.SIGCONT)
    run.notes.append("worker frozen 5 s (lease 3 s)")


async def server_kill(run: Run) -> None:
    """kill -9 of the control plane, then a new one on the same port and store."""
    assert run.server is not None
    await run.server.kill()
    restarted = run.start_server("server-restarted")
    await wait_healthy(run.url, restarted)


async def client_drop(run: Run) -> None:
    """Every client's connection broken without a close handshake; they resume with `since`."""
    for follower in run.followers:
        await follower.drop()


async def postgres_restart(run: Run) -> None:
    """PostgreSQL restarted under the running control plane."""
    cluster = _pg_cluster()
    await _sh("pg_ctlcluster", "--skip-systemctl-redirect", *cluster, "restart")
    await _sh("pg_isready", "-h", "127.0.0.1", "-p", "5432", "-t", "30")
    run.notes.append("PostgreSQL restarted")


async def redis_restart(run: Run) -> None:
    """Redis (the event bus) stopped and started again under the running control plane."""
    await _sh("redis-cli", "-h", "127.0.0.1", "-p", "6379", "shutdown", "nosave", check=False)
    await asyncio.sleep(1.0)  # the fault: a second without the bus
    await start_redis()
    run.notes.append("Redis down 1 s")


async def start_redis() -> None:
    """Start Redis as `.ci/run` does, and wait for it."""
    await _sh("mkdir", "-p", "/var/lib/redis", "/var/log/redis")
    await _sh("redis-server", "--daemonize", "yes", "--bind", "127.0.0.1", "-::1", "--port",
              "6379", "--save", "", "--appendonly", "no", "--dir", "/var/lib/redis",
              "--logfile", "/var/log/redis/ci.log")
    for _ in range(100):
        if (await _sh("redis-cli", "-h", "127.0.0.1", "-p", "6379", "ping", check=False)) == 0:
            return
        await asyncio.sleep(0.1)
    raise AssertionError("Redis did not come back")


@contextlib.asynccontextmanager
async def small_disk(run: Run) -> AsyncIterator[None]:
    """The control plane's data folder on a 64 MB tmpfs (its artifacts land there)."""
    folder = run.cluster.root / "server"
    folder.mkdir(parents=True, exist_ok=True)
    await _sh("mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(folder))
    try:
        yield
    finally:
        for proc in run.cluster.procs:
            await proc.kill()
        await _sh("umount", "-l", str(folder), check=False)


async def disk_full(run: Run) -> None:
    """The data folder's disk filled while results with files arrive, then space freed."""
    filler = run.cluster.root / "server" / "filler"
    await _sh("sh", "-c", f"dd if=/dev/zero of={filler} bs=1M count=64 2>/dev/null", check=False)
    await asyncio.sleep(3.0)  # the fault: three seconds with no space left
    filler.unlink()
    run.notes.append("disk full 3 s")


@contextlib.asynccontextmanager
async def namespaced_worker(run: Run) -> AsyncIterator[None]:
    """Worker w0 in a network namespace of its own, joined to this host by a veth pair."""
    tag = uuid.uuid4().hex[:6]
    ns, host_if, ns_if = f"shoal-{tag}", f"sh{tag}h", f"sh{tag}w"
    octet = int(tag[:2], 16) % 200 + 20
    host_ip, ns_ip = f"10.213.{octet}.1", f"10.213.{octet}.2"
    ip = shutil.which("ip") or "/usr/sbin/ip"
    for args in (["netns", "add", ns], ["link", "add", host_if, "type", "veth", "peer", "name",
                                        ns_if],
                 ["link", "set", ns_if, "netns", ns], ["addr", "add", f"{host_ip}/24", "dev",
                                                       host_if],
                 ["link", "set", host_if, "up"],
                 ["netns", "exec", ns, ip, "addr", "add", f"{ns_ip}/24", "dev", ns_if],
                 ["netns", "exec", ns, ip, "link", "set", ns_if, "up"],
                 ["netns", "exec", ns, ip, "link", "set", "lo", "up"]):
        await _sh(ip, *args)
    run.server_host = "0.0.0.0"  # reachable from the namespace
    run.link = host_if
    c = run.cluster
    original = c.start_worker

    def start_in_namespace(name: str, token: str, server_url: str, **kw: Any) -> Proc:
        if name != "w0":
            return original(name, token, server_url, **kw)
        url = server_url.replace("127.0.0.1", host_ip)
        data_dir = c.root / f"worker-{name}"
        return c.start(f"worker-{name}", [
            "worker", "--server", url, "--token", token, "--name", name, "--slots",
            str(kw.get("slots", 1))], c.env(data_dir), data_dir, prefix=[ip, "netns", "exec", ns])

    c.start_worker = start_in_namespace  # type: ignore[method-assign]
    try:
        yield
    finally:
        c.start_worker = original  # type: ignore[method-assign]
        for proc in c.procs:
            await proc.kill()
        await _sh(ip, "link", "del", host_if, check=False)
        await _sh(ip, "netns", "del", ns, check=False)


async def network_cut(run: Run) -> None:
    """The namespaced worker's link taken down past its lease, then up: it rejoins with the
    results it finished meanwhile."""
    link = run.link
    ip = shutil.which("ip") or "/usr/sbin/ip"
    await _sh(ip, "link", "set", link, "down")
    await asyncio.sleep(4.0)  # the fault: cut off for longer than the 3 s lease
    await _sh(ip, "link", "set", link, "up")
    run.notes.append("worker cut off 4 s (lease 3 s)")


def cli_env(model_url: str) -> dict[str, str]:
    """A worker's environment for the Codex CLI (`make clis`) talking to the demo model."""
    from tests.conftest import CLI_DIR

    fake = model_url.removesuffix("/v1")
    return {"SHOAL_TOOL_PATH": str(CLI_DIR), "OPENAI_API_KEY": "sk-fake",
            "SHOAL_OPENAI_BASE_URL": f"{fake}/v1", "SHOAL_CODEX_MODEL": "gpt-fake",
            "SHOAL_MODEL_MAX_RETRIES": "0"}


def cli_processes(root: Path) -> list[int]:
    """Processes of a vendor CLI whose working folder lies under `root` (the workers')."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cwd = os.readlink(entry / "cwd")
            if "codex" in cmdline and cwd.startswith(str(root)):
                found.append(int(entry.name))
    return found


def _pg_cluster() -> list[str]:
    out = subprocess.run(["pg_lsclusters", "-h"], capture_output=True, text=True, check=True)
    version, name = out.stdout.split()[:2]
    return [version, name]


async def _sh(*args: str, check: bool = True) -> int:
    proc = await asyncio.create_subprocess_exec(*args, stdout=asyncio.subprocess.DEVNULL,
                                                stderr=asyncio.subprocess.PIPE)
    _, err = await proc.communicate()
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(args)} exited {proc.returncode}: {err.decode()[:500]}")
    return proc.returncode or 0


FAULTS = (
    Fault("worker kill -9", worker_kill),
    Fault("worker cut off from the network", network_cut, privileged=True,
          prepare=namespaced_worker),
    Fault("result from an expired attempt", expired_result),
    Fault("control plane kill -9 (SQLite)", server_kill),
    Fault("control plane kill -9 (PostgreSQL)", server_kill, database="postgres"),
    Fault("control plane kill -9 mid loop and route", server_kill, workflows=WORKFLOWS),
    Fault("planner: malformed JSON, cyclic plan, empty plan", no_fault, workflows=BAD_PLANS),
    Fault("a CLI that hangs (time-out, no process left)", no_fault, workflows=HANGING_CLI,
          clis=True),
    Fault("PostgreSQL restarted", postgres_restart, database="postgres", privileged=True),
    Fault("Redis restarted", redis_restart, redis=True, privileged=True),
    Fault("client WebSocket dropped", client_drop),
    Fault("disk full while storing files", disk_full, privileged=True, prepare=small_disk),
)
