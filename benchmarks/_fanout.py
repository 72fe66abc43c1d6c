"""Fan-out: simulated watchers of running tasks on a real control plane (one task, many tasks,
several copies) and the fan-out floor they are compared with; `bench_load.py --clients` runs
them, each size in a process of its own."""

from __future__ import annotations

import asyncio
import contextlib
import cProfile
import gc
import json
import pstats
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from _layers import LAYERS, Layers
from _report import percentile
from _sims import SIM, rss_kb, system_seconds, warm_up
from bench_dag import bench_settings, database, signed_in_client, worker_process
from bench_throughput import (  # puts `tests` on the path
    copies,
    cpu_seconds,
    descendants,
    drive,
    plan,
    quiet,
)
from rich.console import Console
from rich.table import Table
from starlette.applications import Starlette
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect
from tests.e2e.procs import cluster, signed_in
from websockets.frames import Frame, Opcode

from shoal.api.listen import bind_socket
from shoal.api.server import running_server, uvicorn_options

try:  # (an older Shoal, measured through PYTHONPATH, has none: its floor writes through Starlette)
    from shoal.api.direct import direct_of
except ImportError:  # pragma: no cover
    try:  # (where it was before issue 37's eleventh round)
        from shoal.api.fanout import direct_of  # type: ignore[attr-defined,no-redef]
    except ImportError:
        direct_of = None

CHAIN = [{"name": f"s{i}", "description": f"Step {i}", "tool": "echo",
          "options": {"delay": 0.1}, "dependencies": [f"s{i - 1}"] if i else []}
         for i in range(10)]
PER_PROCESS = 2500  # simulated watchers per client process
FLOOR_GAP = 0.1  # between the floor's bursts: as far apart as the chain's steps


@dataclass
class Watching:
    """Watchers in their processes: when all had subscribed, memory per watcher, and (once the
    block has left) what each event number reached."""

    connect_s: float = 0.0
    kb: float = 0.0
    got: dict[int, list[float]] = field(default_factory=dict)
    # This process's CPU and kernel seconds once the last deliveries had been written (before
    # the watchers leave), and once they had left: closing a socket is not a delivery.
    settled: tuple[float, float] = (0.0, 0.0)
    closed: tuple[float, float] = (0.0, 0.0)
    on_settled: list[Callable[[], object]] = field(default_factory=list)  # called then

    def closing_us(self, clients: int) -> float:
        """CPU of this process per watcher while the watchers left."""
        return (self.closed[0] - self.settled[0]) * 1e6 / max(1, clients)

    def merge(self, other: Watching) -> None:
        """Add `other`'s deliveries (and its connect time and memory: divide them after)."""
        self.connect_s += other.connect_s
        self.kb += other.kb
        for seq, (count, last) in other.got.items():
            seen = self.got.setdefault(seq, [0, 0.0])
            seen[0] += count
            seen[1] = max(seen[1], last)

    def figures(self, clients: int, stored: dict[int, float], cpu: float,
                kernel: float = float("nan"), *, tasks: int = 1,
                closing: bool = False) -> dict[str, Any]:
        """The run's figures for the events `stored` (number → timestamp), each of which
        `clients / tasks` watchers follow; with `closing`, the CPU per watcher of this
        process (the control plane's, or the floor's) while they left."""
        got = self.got
        lags = [(got[seq][1] - at) * 1000 for seq, at in stored.items() if seq in got]
        delivered = sum(got.get(seq, [0, 0.0])[0] for seq in stored)
        return {"clients": clients, "tasks": tasks, "events": len(stored),
                "missing": clients // tasks * len(stored) - delivered,
                "p50": percentile(lags, 50), "p99": percentile(lags, 99),
                "max": max(lags, default=0.0), "kb": self.kb, "connect_s": self.connect_s,
                "cpu_us": cpu * 1e6 / max(1, delivered),
                "kernel_us": kernel * 1e6 / max(1, delivered),
                "closing_us": self.closing_us(clients) if closing else float("nan")}


@contextlib.asynccontextmanager
async def watchers(url: str, token: str, clients: int, *, warm: bool = True,
                   tasks: list[str] | None = None) -> AsyncIterator[Watching]:
    """`clients` simulated watchers of `url`, subscribed (after WARM that came and went, if
    `warm`) to every task's events, or each to one of `tasks` in turn; on exit, their
    deliveries."""
    if warm:
        await warm_up("sim_clients.py", "--url", url, "--token", token)
    gc.collect()
    before, watching = rss_kb(), Watching()
    parts = [min(PER_PROCESS, clients - i) for i in range(0, clients, PER_PROCESS)]
    procs = [await asyncio.create_subprocess_exec(
        sys.executable, str(SIM / "sim_clients.py"), "--url", url, "--token", token,
        "--count", str(n), "--tasks", ",".join(tasks or ()), stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, limit=2**26) for n in parts]
    started = time.monotonic()
    for proc in procs:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 900)
        if not line.startswith(b"subscribed"):
            raise RuntimeError(f"the watchers did not subscribe: {line!r}")
    watching.connect_s = time.monotonic() - started
    gc.collect()
    watching.kb = (rss_kb() - before) / clients
    yield watching
    await asyncio.sleep(2.0)  # the last deliveries reach the slowest watchers
    watching.settled = time.process_time(), system_seconds()
    for call in watching.on_settled:
        call()
    for proc in procs:
        assert proc.stdin is not None
        assert proc.stdout is not None
        proc.stdin.close()
        for seq, (count, last) in json.loads(
                await asyncio.wait_for(proc.stdout.readline(), 300)).items():
            seen = watching.got.setdefault(int(seq), [0, 0.0])
            seen[0] += count
            seen[1] = max(seen[1], last)
        await proc.wait()
    watching.closed = time.process_time(), system_seconds()


@contextlib.asynccontextmanager
async def chain_plane(kind: str, tasks: int | None = None,
                      ) -> AsyncIterator[tuple[Any, httpx.AsyncClient]]:
    """A control plane on a fresh `kind` database with a worker process (running at most
    `tasks` tasks at once, if given), and a client signed in to it."""
    with tempfile.TemporaryDirectory(prefix="shoal-fanout-") as name:
        tmp = Path(name)
        async with database(kind, tmp) as url:
            settings = bench_settings(tmp, url)
            if tasks is not None:
                settings = settings.model_copy(update={"max_active_tasks": tasks})
            async with running_server(settings) as srv, \
                    worker_process(srv, tmp, uvloop=False, records={}):
                client = await signed_in_client(srv, settings)
                try:
                    yield srv, client
                finally:
                    await client.aclose()


async def measure_clients(kind: str, clients: int, profile: str = "",
                          tasks: int = 1, rounds: int = 3, watched: int = 0) -> dict[str, Any]:
    """One run with `clients` watchers subscribed live while a 10-step chain runs (or `tasks`
    chains at once, each followed by `clients / tasks` of the watchers, or with `watched`,
    only the first `watched` of them, each by `clients / watched`)."""
    if tasks > 1:
        return await _measure_spread(kind, clients, tasks, profile, rounds, watched)
    async with chain_plane(kind) as (srv, client):
        token = client.headers["Authorization"].removeprefix("Bearer ")
        profiler = cProfile.Profile() if profile else None
        stored: dict[int, float] = {}
        # A chain first, unwatched: the task's first burst is then not also the first time
        # this control plane and its worker run one (the watchers and the floor are warmed
        # too). Then one more, unwatched, for the chain's own CPU, which the floor (replaying
        # the bursts) does not spend: it is taken off the watched run's, as `_measure_spread`
        # does.
        await follow_chain(client, {})
        unwatched = cProfile.Profile() if profile else None  # its calls are taken off too
        with profiled(unwatched):
            bare, bare_kernel = time.process_time(), system_seconds()
            await follow_chain(client, {})
            bare, bare_kernel = time.process_time() - bare, system_seconds() - bare_kernel
        async with watchers(srv.url, token, clients) as watching:
            if profiler is not None:
                watching.on_settled.append(profiler.disable)  # as the CPU: not the leaving
                profiler.enable()
            lanes = srv.app.state.lanes
            cpu, kernel = time.process_time(), system_seconds()
            released, joined = lanes.released, lanes.joined
            await follow_chain(client, stored)
            print(f"while the chain ran, lanes let {lanes.released - released} sockets go "
                  f"back to their own streams and took {lanes.joined - joined} in",
                  file=sys.stderr)
        # Up to when the last deliveries had been written: not the watchers' leaving (nor the
        # 2 s they were given to read the last burst, idle: the one sleep a bare chain lacks).
        cpu, kernel = watching.settled[0] - cpu, watching.settled[1] - kernel
        print(f"the chain's own CPU, unwatched: {bare * 1000:.0f} ms (taken off)",
              file=sys.stderr)
        cpu, kernel = cpu - bare, kernel - bare_kernel
        if profiler is not None:
            profiler.dump_stats(f"{profile}.{clients}")
            pstats.Stats(profiler).sort_stats("tottime").print_stats(30)
    figures = watching.figures(clients, stored, cpu, kernel, closing=True)
    if profiler is not None and unwatched is not None:
        print_layers(pstats.Stats(profiler), clients * len(stored) - figures["missing"],
                     pstats.Stats(unwatched))
    return figures


async def _measure_spread(kind: str, clients: int, tasks: int, profile: str,
                          rounds: int = 3, watched: int = 0) -> dict[str, Any]:
    """`tasks` chains submitted at once, each followed by `clients / tasks` watchers subscribed
    to it alone; each chain's first step holds it long enough for every watcher to subscribe
    (a task id is known only once submitted). What is measured starts once all have: the
    events' numbers and times come from the bus from then on, and the CPU is counted then.

    Running a hundred chains costs CPU of its own, which one chain spread over the same
    deliveries does not, and that cost moves by some 10 % from one run to the next, as much
    as the deliveries' own: so the same chains are run with no watcher, then watched, `rounds`
    times in turn on the same control plane, and the unwatched runs' CPU is taken off the
    watched runs'. In every run each chain is held at its first step until the CPU is being
    counted (`_still_held` checks it), so no count misses a chain's work.

    With `watched`, the watchers all follow the first `watched` chains and the rest run
    unwatched: the same chains and, the chains being alike, the same number of deliveries as
    a run without it, so the two runs' whole CPU a delivery (`gross_us`, the chains' own
    included and nothing taken off) compares what only the spread of the watchers changes."""
    followed = followed_tasks(clients, tasks, watched)
    merged, stored = Watching(), dict[int, float]()
    cpu = kernel = bare = bare_kernel = kb = 0.0
    profiler = cProfile.Profile() if profile else None
    unwatched = cProfile.Profile() if profile else None  # the chains' own calls, taken off
    async with chain_plane(kind, tasks) as (srv, client):
        token = client.headers["Authorization"].removeprefix("Bearer ")
        for _ in range(rounds):
            async with srv.services.bus.subscribe() as sub:  # unwatched: the chains' own CPU
                ids, held = await _submit_held(client, tasks, 1 + tasks * 0.03)
                with profiled(unwatched):
                    began = time.process_time(), system_seconds()
                    _still_held(held)
                    await _follow_all(sub, set(ids), {})
                    bare += time.process_time() - began[0]
                    bare_kernel += system_seconds() - began[1]
            ids, held = await _submit_held(client, tasks, 5 + clients * 0.004)
            async with watchers(srv.url, token, clients, tasks=ids[:followed]) as watching, \
                    srv.services.bus.subscribe() as sub:
                with profiled(profiler):
                    began = time.process_time(), system_seconds()
                    _still_held(held)
                    await _follow_all(sub, set(ids), stored, set(ids[:followed]))
                    cpu += time.process_time() - began[0]
                    kernel += system_seconds() - began[1]
            kb = kb or watching.kb  # the first round's: later ones reuse its memory
            merged.merge(watching)
    print(f"{tasks} chains, {rounds} rounds: {cpu:.2f} s of CPU watched, {bare:.2f} s not "
          "(taken off)", file=sys.stderr)
    merged.kb, merged.connect_s = kb, merged.connect_s / rounds
    figures = merged.figures(clients, stored, cpu - bare, kernel - bare_kernel, tasks=followed)
    figures["gross_us"] = cpu * 1e6 / max(1, clients // followed * len(stored)
                                          - figures["missing"])
    if profiler is not None and unwatched is not None:
        profiler.dump_stats(f"{profile}.{clients}x{tasks}")
        unwatched.dump_stats(f"{profile}.{clients}x{tasks}.unwatched")
        print_layers(pstats.Stats(profiler), clients // followed * len(stored) - figures["missing"],
                     pstats.Stats(unwatched))
    return figures


@contextlib.contextmanager
def profiled(profiler: cProfile.Profile | None) -> Iterator[None]:
    """`profiler` (if any) enabled inside the block."""
    if profiler is None:
        yield
        return
    profiler.enable()
    try:
        yield
    finally:
        profiler.disable()


async def _submit_held(client: httpx.AsyncClient, tasks: int,
                       hold: float) -> tuple[list[str], float]:
    """Submit `tasks` chains whose first step waits `hold` seconds; their ids, and the
    `time.monotonic()` until which no chain can have gone past that step."""
    held = time.monotonic() + hold
    first = {"name": "hold", "description": "Wait for the watchers", "tool": "echo",
             "options": {"delay": hold}}
    plan = [first, *({**step, "dependencies": step["dependencies"] or ["hold"]}
                     for step in CHAIN)]
    ids = []
    for i in range(tasks):
        created = await client.post("/api/v1/tasks", json={
            "description": f"Watched by a few ({i})", "plan": plan})
        created.raise_for_status()
        ids.append(created.json()["task_id"])
    return ids, held


def _still_held(held: float) -> None:
    """Stop if a chain may have gone past its held step before the CPU was counted: its work
    would be missing from the count (the unwatched chains' did go missing when their hold
    was shorter than submitting them all took)."""
    if time.monotonic() >= held:
        raise SystemExit("a chain may have run before the CPU was counted: its first step "
                         "held it too short a time for this machine")


WATCHED = frozenset({"task_update", "subtask_update", "task_complete", "task_failed"})


async def _follow_all(sub: Any, ids: set[str], stored: dict[int, float],
                      followed: set[str] | None = None) -> None:
    """Note the number and time of each watched event of the tasks `followed` (all `ids` if
    None) until all of `ids` ended."""
    running, followed = set(ids), ids if followed is None else followed
    async for event in sub:
        task = str(event.task_id)
        if task in ids and event.type.value in WATCHED:
            if task in followed:
                stored[event.seq] = event.timestamp.timestamp()
            if event.type.value in ("task_complete", "task_failed"):
                running.discard(task)
                if not running:
                    return


def print_layers(stats: pstats.Stats, deliveries: int,
                 unwatched: pstats.Stats | None = None) -> None:
    """The profiled calls per delivered event, by layer (`_layers.py`); with `unwatched` (the
    same chains run with no watcher), its calls are taken off first, layer by layer, and the
    functions whose calls grew most with the watchers are listed."""
    layers, bare = Layers(stats), Layers(unwatched) if unwatched is not None else None
    title = "Control-plane calls per delivered event by layer (own functions / with the helpers "
    title += "they call)" if bare is None else "they call), less the same chains unwatched"
    table = Table(title=title, title_justify="left")
    for col in ("layer", "own", "with helpers"):
        table.add_column(col, justify="left" if col == "layer" else "right")

    def count(of: dict[str, float], name: str) -> float:
        return sum(of.values()) if name == "all" else of.get(name, 0)

    for name in (*LAYERS, "all"):
        own, total = count(layers.own, name), count(layers.total, name)
        if bare is not None:
            own, total = own - count(bare.own, name), total - count(bare.total, name)
        table.add_row(name, f"{own / max(1, deliveries):.1f}",
                      f"{total / max(1, deliveries):.1f}")
    Console(width=140).print(table)
    if unwatched is not None:
        before: dict[Any, Any] = unwatched.stats  # type: ignore[attr-defined]
        grown = sorted(((row[1] - before.get(func, (0, 0))[1], func)
                        for func, row in stats.stats.items()),  # type: ignore[attr-defined]
                       reverse=True)[:25]
        for calls, (path, line, name) in grown:
            print(f"{calls / max(1, deliveries):8.3f}  {name}  {path.rsplit('/', 2)[-2:]}:{line}")


async def follow_chain(client: httpx.AsyncClient, stored: dict[int, float]) -> None:
    """Submit the chain and follow it to its end; `stored` gets each watched event's number
    and timestamp."""
    created = await client.post("/api/v1/tasks", json={
        "description": "Watched by many", "plan": CHAIN})
    await _follow_sse(client, created.json()["task_id"], stored, 0.0)


async def measure_clients_on_copies(clients: int, n: int) -> dict[str, Any]:
    """`clients` watchers spread evenly over `n` copies (`shoal serve` processes on PostgreSQL
    and Redis, as `bench_throughput.py` starts them) while the chain runs on the first: its
    events reach the others' watchers through Redis. CPU per delivery is all copies'; memory
    per watcher is not measured (the copies are other processes)."""
    per = [clients // n + (i < clients % n) for i in range(n)]
    stored: dict[int, float] = {}
    with tempfile.TemporaryDirectory(prefix="shoal-fanout-copies-") as name, quiet():
        root = Path(name)
        async with database("postgres", root) as url, cluster(root, url) as group, \
                copies(group, n) as run, signed_in(run.urls[0], "bench") as client:
            token = client.headers["Authorization"].removeprefix("Bearer ")
            async with contextlib.AsyncExitStack() as stack:
                parts = [await stack.enter_async_context(watchers(u, token, k, warm=False))
                         for u, k in zip(run.urls, per, strict=True)]
                pids = [p for server in run.servers for p in descendants(server.pid)]
                cpu = cpu_seconds(pids)
                await follow_chain(client, stored)
            cpu = cpu_seconds(pids) - cpu
    merged = Watching()
    for part in parts:
        merged.merge(part)
    merged.kb = float("nan")
    return merged.figures(clients, stored, cpu)


async def measure_busy_copies(clients: int, busy: int) -> dict[str, Any]:
    """What one copy's watchers of one task cost it while the deployment is busy elsewhere:
    two copies (as `measure_clients_on_copies`); `busy` tasks kept running on the first, one
    after another (`bench_throughput.drive`), none watched on the second; `clients` watchers
    on the second follow one chain running on the first. The figure is the second copy's own
    CPU while the chain runs. A copy that hears every event of the deployment pays for the
    busy tasks too; one that hears only the tasks its watchers follow (ADR 0043) does not."""
    stored: dict[int, float] = {}
    with tempfile.TemporaryDirectory(prefix="shoal-fanout-busy-") as name, quiet():
        root = Path(name)
        async with database("postgres", root) as url, cluster(root, url) as group, \
                copies(group, 2) as run, signed_in(run.urls[0], "bench") as client:
            token = client.headers["Authorization"].removeprefix("Bearer ")
            stop, ended = asyncio.Event(), [0]
            body = {"description": "busy elsewhere", "plan": plan(4)}
            drivers = [asyncio.create_task(drive(run.urls[0], body, stop, ended))
                       for _ in range(busy)]
            try:
                await asyncio.sleep(3.0 if busy else 0)  # the busy tasks reach their pace
                ids, held = await _submit_held(client, 1, 5 + clients * 0.004)
                async with watchers(run.urls[1], token, clients, tasks=ids,
                                    warm=False) as watching:
                    pids = descendants(run.servers[1].pid)
                    cpu, began, since = cpu_seconds(pids), ended[0], time.time()
                    _still_held(held)
                    await _follow_sse(client, ids[0], stored, since)
                    cpu, background = cpu_seconds(pids) - cpu, ended[0] - began
            finally:
                stop.set()
                for task in drivers:
                    task.cancel()
                await asyncio.gather(*drivers, return_exceptions=True)
    watching.kb = float("nan")
    print(f"{background} busy tasks ended on the first copy while the chain ran; the second "
          f"copy's CPU: {cpu:.2f} s", file=sys.stderr)
    return {**watching.figures(clients, stored, cpu), "busy": busy, "background": background}


async def _follow_sse(client: httpx.AsyncClient, task_id: str, stored: dict[int, float],
                      since: float) -> None:
    """Note the number and time of each watched event of task `task_id` made after `since`
    (the watchers subscribed then: they are sent no earlier one) until the task ends."""
    async with client.stream("GET", f"/api/v1/tasks/{task_id}/events") as resp:
        async for line in resp.aiter_lines():
            if line.startswith("data: "):
                event = json.loads(line[6:])
                at = datetime.fromisoformat(event["timestamp"]).timestamp()
                if event["type"] in WATCHED and "seq" in event and at >= since:
                    stored[event["seq"]] = at
                if event["type"] in ("task_complete", "task_failed"):
                    return


class FanOutFloor:
    """The fan-out floor: the same watchers, the same uvicorn and WebSocket stack and options,
    and no Shoal logic: a subscription is a socket in a list, and a burst is one frame, made
    once as its bytes on the wire and written to each socket's transport in turn (as a lane
    writes a plain socket's, ADR 0045; through `send_text` where the protocol is not found)."""

    def __init__(self) -> None:
        self.sockets: list[tuple[WebSocket, Any]] = []
        self.by_task: dict[str, list[tuple[WebSocket, Any]]] = {}  # those following one task
        self.app = Starlette(routes=[WebSocketRoute("/ws", self.socket)])

    async def socket(self, ws: WebSocket) -> None:
        await ws.accept()
        task = json.loads(await ws.receive_text()).get("task_id")  # the subscription
        await ws.send_text('{"type": "subscribed"}')
        direct = direct_of(ws) if direct_of is not None else None
        entry = (ws, direct.raw if direct is not None else None)
        sockets = self.sockets if task is None else self.by_task.setdefault(task, [])
        sockets.append(entry)
        try:
            with contextlib.suppress(WebSocketDisconnect):
                while True:
                    await ws.receive_text()
        finally:
            sockets.remove(entry)

    async def burst(self, items: list[dict[str, Any]], task: str | None = None) -> None:
        """Write `items` as one frame to the sockets following every event, or `task`'s."""
        sockets = self.sockets if task is None else self.by_task.get(task)
        if not sockets:
            return
        text = '{"type": "batch", "items": [' + ", ".join(map(json.dumps, items)) + "]}"
        data = Frame(Opcode.TEXT, text.encode()).serialize(mask=False)
        for ws, raw in sockets:
            if raw is not None:
                raw.transport.write(data)
            else:
                await ws.send_text(text)


async def chain_bursts(kind: str) -> list[list[dict[str, Any]]]:
    """The watched events of one run of the chain on a real control plane, in the lists the
    bus delivered them in (a commit's, as a lane takes them), in their wire form: what the
    floor sends, so that it writes, and its watchers read, the same bytes as Shoal's (a task's
    first burst carries its plan: some 4 kB a frame where later ones are about 1 kB)."""
    async with chain_plane(kind) as (srv, client):
        return [[dict(e.wire()) for e in burst] for burst in await chain_events(srv, client)]


async def chain_events(srv: Any, client: httpx.AsyncClient) -> list[list[Any]]:
    """The watched events of one run of the chain on `srv`, in the lists the bus delivered
    them in."""
    bursts: list[list[Any]] = []

    async def record(sub: Any) -> None:
        while events := await sub.take(1000):
            if burst := [e for e in events if e.type.value in WATCHED]:
                bursts.append(burst)
            if any(e.type.value in ("task_complete", "task_failed") for e in events):
                return

    async with srv.services.bus.subscribe() as sub:
        await asyncio.gather(record(sub), follow_chain(client, {}))
    return bursts


def followed_tasks(clients: int, tasks: int, watched: int = 0) -> int:
    """How many of `tasks` the watchers follow (the first `watched`, or all), each by as many
    of the `clients`; stops the run when they cannot be spread so."""
    followed = watched or tasks
    if clients % followed or followed > tasks:
        raise SystemExit(f"--clients {clients} is not a multiple of {followed} followed tasks")
    return followed


async def measure_floor(kind: str, clients: int) -> dict[str, Any]:
    """The floor with `clients` watchers: the chain's own bursts (`chain_bursts`), one every
    FLOOR_GAP (no sooner can the chain's steps end) or, if writing one took longer, at once,
    its events numbered and stamped anew."""
    bursts = await chain_bursts(kind)
    async with floor_server() as (floor, url):
        stored: dict[int, float] = {}
        async with watchers(url, "floor", clients) as watching:
            cpu, kernel, seq = time.process_time(), system_seconds(), 0
            due = time.monotonic()
            for burst in bursts:
                await asyncio.sleep(due - time.monotonic())  # (at once if it is late)
                due += FLOOR_GAP
                items = []
                for event in burst:
                    seq += 1
                    stored[seq] = time.time()
                    stamp = datetime.fromtimestamp(stored[seq], UTC)
                    items.append({**event, "seq": seq,
                                  "timestamp": stamp.isoformat().replace("+00:00", "Z")})
                await floor.burst(items)
        cpu, kernel = watching.settled[0] - cpu, watching.settled[1] - kernel  # as Shoal's
    return watching.figures(clients, stored, cpu, kernel, closing=True)


@contextlib.asynccontextmanager
async def floor_server() -> AsyncIterator[tuple[FanOutFloor, str]]:
    """A `FanOutFloor` served by uvicorn with Shoal's options, and its URL."""
    floor = FanOutFloor()
    with tempfile.TemporaryDirectory(prefix="shoal-floor-") as name:
        settings = bench_settings(Path(name), "sqlite+aiosqlite://")
        config = uvicorn.Config(floor.app, log_level="warning", log_config=None,
                                lifespan="off", **uvicorn_options(settings))
        server = uvicorn.Server(config)
        sock = bind_socket("127.0.0.1", 0)
        task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started:
            if task.done():
                task.result()
            await asyncio.sleep(0.01)
        try:
            yield floor, f"http://127.0.0.1:{sock.getsockname()[1]}"
        finally:
            server.should_exit = True
            await task
            sock.close()
