"""What a worker process adds to each step of a chain: Shoal's worker and the floor's, each
driven by the same control plane with no logic and no store, one attempt at a time.

    .venv/bin/python benchmarks/worker_roundtrip.py [--steps 1000] [--rounds 3] [--warm 200]

A W2 step is the control plane's work (decide, store, send) and then the worker's: the
`execute_task` read, the attempt run, its result written back. `same_writes.py` prices
Shoal's writes beside the floor's; this prices the other half. A WebSocket server (the
`websockets` library's own, as the floor's) plays the control plane:

- Shoal's worker process (`_worker.py` on uvloop with its no-op tool, as `bench_dag.py`
  runs it; one worker of 100 slots) registers and gets `registered`; each step is an
  `execute_tasks` frame of one attempt shaped as a W2 step's (its instructions, one upstream
  result: `STEP`, as the control plane sends it), answered by a `task_result`; the result's
  `acks` go after the next attempt, in the runtime's order.
- The floor's worker process (`_floor.py --worker`) gets its own small frames: one attempt,
  one result.

Each round starts a worker process, runs `--warm` steps, then `--steps` measured; the two
take turns round by round, so the machine's drift over the minutes falls on both. Per
worker: the round trip (the server's write of the attempt to its read of the result), p50 and
p90 in µs, and the worker process's CPU per attempt; then Shoal's over the floor's, which is
what Shoal's worker adds to a W2 step beside the floor's. Results go to
`benchmarks/results/worker_roundtrip.json`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import uvloop
import websockets
from _api import cpu_seconds
from _shoal_worker import acks_frame, execute_frame, register, results_of
from _shoal_worker import worker_process as shoal_worker
from _steal import counted
from rich.console import Console
from rich.table import Table

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "worker_roundtrip.json"
WORKERS = ("shoal", "floor")


@dataclass
class Round:
    """One round of one worker: each measured step's round trip (s), and the worker process's
    CPU seconds over them."""

    worker: str
    trips: list[float] = field(default_factory=list)
    cpu: float = 0.0
    steal: list[float] = field(default_factory=list)

    def figures(self) -> dict[str, float]:
        """p50 and p90 of the round trip in µs, and the worker's CPU per attempt in µs."""
        trips = sorted(self.trips)
        return {"p50_us": statistics.median(trips) * 1e6,
                "p90_us": trips[int(0.9 * (len(trips) - 1))] * 1e6,
                "cpu_us": self.cpu / len(trips) * 1e6}


def shoal_frame(task_id: str) -> tuple[str, str]:
    """One attempt's `execute_tasks` frame for Shoal's worker, and the attempt's id."""
    attempt = str(uuid.uuid4())
    return execute_frame([(attempt, 0.0)], task_id), attempt


async def shoal_steps(ws: Any, steps: int, trips: list[float] | None) -> None:
    """`steps` steps with Shoal's worker on `ws`; each round trip appended to `trips`."""
    task_id = str(uuid.uuid4())
    acks: str | None = None
    for _ in range(steps):
        frame, _ = shoal_frame(task_id)
        began = time.perf_counter()
        await ws.send(frame)
        if acks is not None:  # the last step's, after this one's attempt (the runtime's order)
            await ws.send(acks)
        while (done := results_of(await ws.recv())) is None:
            pass
        if trips is not None:
            trips.append(time.perf_counter() - began)
        acks = acks_frame(done)


async def floor_steps(ws: Any, steps: int, trips: list[float] | None) -> None:
    """`steps` steps with the floor's worker on `ws`."""
    for _ in range(steps):
        frame = json.dumps({"tasks": [[str(uuid.uuid4()), 0]]})
        began = time.perf_counter()
        await ws.send(frame)
        await ws.recv()  # {"results": [...]}: its one attempt
        if trips is not None:
            trips.append(time.perf_counter() - began)


class Plane:
    """The control plane's side: each connection that comes, handed over as it is (Shoal's
    worker registered first); kept open until the round ends."""

    def __init__(self, shoal: bool) -> None:
        self.shoal = shoal
        self.joined: asyncio.Queue[Any] = asyncio.Queue()
        self.done = asyncio.Event()

    async def serve(self, ws: Any) -> None:
        if self.shoal:
            await register(ws)
        await self.joined.put(ws)
        await self.done.wait()


@contextlib.asynccontextmanager
async def worker_process(worker: str, plane: Plane) -> AsyncIterator[tuple[Any, int]]:
    """A worker process of kind `worker` connected to `plane`: its first connection and its
    pid. It stops on the way out."""
    async with websockets.serve(plane.serve, "127.0.0.1", 0, compression=None) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        spawned = (shoal_worker(f"http://127.0.0.1:{port}", 1) if worker == "shoal"
                   else floor_worker(f"ws://127.0.0.1:{port}"))
        async with spawned as pid:
            try:
                async with asyncio.timeout(60):
                    ws = await plane.joined.get()
                yield ws, pid
            finally:
                plane.done.set()


@contextlib.asynccontextmanager
async def floor_worker(url: str) -> AsyncIterator[int]:
    """`_floor.py`'s worker process dialling `url`; its pid. It stops on the way out."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(HERE / "_floor.py"), "--worker", url, stdin=asyncio.subprocess.PIPE)
    try:
        yield proc.pid
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        await proc.wait()


Steps = Callable[[Any, int, list[float] | None], Awaitable[None]]
STEPS: dict[str, Steps] = {"shoal": shoal_steps, "floor": floor_steps}


async def one_round(worker: str, steps: int, warm: int) -> Round:
    """A fresh worker process of kind `worker`: `warm` steps, then `steps` measured."""
    run = STEPS[worker]
    out = Round(worker)
    async with worker_process(worker, Plane(shoal=worker == "shoal")) as (ws, pid):
        await run(ws, warm, None)
        proc = psutil.Process(pid)
        with counted(out.steal):
            before = cpu_seconds(proc)
            await run(ws, steps, out.trips)
            out.cpu = cpu_seconds(proc) - before
    return out


async def measure(steps: int, rounds: int, warm: int) -> list[Round]:
    """`rounds` rounds of each worker, taking turns (the first worker alternates too)."""
    out = []
    for r in range(rounds):
        for worker in (WORKERS if r % 2 == 0 else WORKERS[::-1]):
            out.append(await one_round(worker, steps, warm))
    return out


def summary(rounds: list[Round]) -> dict[str, Any]:
    """Per worker the medians over its rounds of each figure; then Shoal's less the floor's
    and over the floor's, from those medians."""
    figures: dict[str, Any] = {}
    for worker in WORKERS:
        mine = [r.figures() for r in rounds if r.worker == worker]
        figures[worker] = {key: statistics.median(f[key] for f in mine) for key in mine[0]}
        figures[worker]["rounds"] = len(mine)
        figures[worker]["steal"] = max((statistics.median(r.steal) for r in rounds
                                        if r.worker == worker and r.steal), default=0.0)
    shoal, floor = figures["shoal"], figures["floor"]
    figures["added_us"] = {key: shoal[key] - floor[key] for key in ("p50_us", "p90_us", "cpu_us")}
    figures["ratio"] = {key: shoal[key] / floor[key] for key in ("p50_us", "p90_us", "cpu_us")}
    return figures


def render(figures: dict[str, Any], steps: int, console: Console) -> None:
    """The table: each worker's figures, and what Shoal's adds."""
    table = Table(title=f"A worker's side of a chain's step (medians of each worker's rounds, "
                        f"{steps} steps a round)")
    for col in ("worker", "round trip p50", "p90", "worker CPU / attempt", "steal"):
        table.add_column(col, justify="left" if col == "worker" else "right")
    for worker, label in (("shoal", "Shoal's worker (_worker.py)"),
                          ("floor", "the floor's worker (_floor.py)")):
        f = figures[worker]
        table.add_row(label, f"{f['p50_us']:.0f} µs", f"{f['p90_us']:.0f} µs",
                      f"{f['cpu_us']:.0f} µs", f"{f['steal']:.1%}")
    added, ratio = figures["added_us"], figures["ratio"]
    table.add_row("Shoal's less the floor's", f"{added['p50_us']:+.0f} µs",
                  f"{added['p90_us']:+.0f} µs", f"{added['cpu_us']:+.0f} µs", "")
    table.add_row("Shoal's over the floor's", f"{ratio['p50_us']:.2f}x",
                  f"{ratio['p90_us']:.2f}x", f"{ratio['cpu_us']:.2f}x", "")
    console.print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warm", type=int, default=200)
    args = parser.parse_args()
    if min(args.steps, args.rounds) < 1 or args.warm < 0:
        parser.error("--steps and --rounds must be at least 1, --warm at least 0")
    rounds = uvloop.run(measure(args.steps, args.rounds, args.warm))
    figures = summary(rounds)
    render(figures, args.steps, Console(width=120))
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps({"steps": args.steps, "figures": figures,
                                   "rounds": [{"worker": r.worker, **r.figures()}
                                              for r in rounds]}, indent=2))
    print(f"Results written to {RESULTS.relative_to(HERE.parent)}")


if __name__ == "__main__":
    main()
