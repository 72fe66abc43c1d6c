"""What a worker process adds to each step of a chain: Shoal's worker and the floor's, each
driven by the same control plane with no logic and no store, one attempt at a time.

    .venv/bin/python benchmarks/worker_roundtrip.py [--steps 1000] [--rounds 3] [--warm 200]
                                                    [--burst N]

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
take turns round by round, so the machine's drift over the minutes falls on both. With
`--burst N` a step is N attempts in one frame, its round trip running to the last result, as
a fan-out's layer reaches a worker (W1's 200 middle subtasks reach each of `bench_dag.py`'s
two workers as 100). Shoal's worker has a slot for each attempt of a burst, as the control
plane never sends more attempts than free slots, and runs untimed (no stamps of its own). A
result that did not succeed stops the run. Per worker: the round trip (the server's write of
the attempt to its read of the result), p50 and p90 in µs, and the worker process's CPU per
attempt; then Shoal's over the floor's, which is what Shoal's worker adds to a W2 step beside
the floor's. Results go to `benchmarks/results/worker_roundtrip.json`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
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
from _shoal_worker import acks_frame, child, execute_frame, register, results_of
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
    burst: int = 1  # attempts a step (one frame)

    def figures(self) -> dict[str, float]:
        """p50 and p90 of a step's round trip in µs, and the worker's CPU per attempt in µs."""
        trips = sorted(self.trips)
        return {"p50_us": statistics.median(trips) * 1e6,
                "p90_us": trips[int(0.9 * (len(trips) - 1))] * 1e6,
                "cpu_us": self.cpu / (len(trips) * self.burst) * 1e6}


def shoal_frame(task_id: str, burst: int = 1) -> tuple[str, list[str]]:
    """An `execute_tasks` frame of `burst` attempts for Shoal's worker, and their ids."""
    attempts = [str(uuid.uuid4()) for _ in range(burst)]
    return execute_frame([(a, 0.0) for a in attempts], task_id), attempts


async def shoal_steps(ws: Any, steps: int, trips: list[float] | None, burst: int = 1) -> None:
    """`steps` steps with Shoal's worker on `ws`, each `burst` attempts in one frame; each
    step's round trip (until its last result) appended to `trips`."""
    task_id = str(uuid.uuid4())
    acks: str | None = None
    for _ in range(steps):
        frame, attempts = shoal_frame(task_id, burst)
        began = time.perf_counter()
        await ws.send(frame)
        if acks is not None:  # the last step's, after this one's attempts (the runtime's order)
            await ws.send(acks)
        left, done = set(attempts), []
        while left:
            if (came := results_of(await ws.recv())) is not None:  # (else a heartbeat, say)
                left.difference_update(came)
                done += came
        if trips is not None:
            trips.append(time.perf_counter() - began)
        acks = acks_frame(done)


async def floor_steps(ws: Any, steps: int, trips: list[float] | None, burst: int = 1) -> None:
    """`steps` steps with the floor's worker on `ws`, each `burst` attempts in one frame."""
    for _ in range(steps):
        attempts = [str(uuid.uuid4()) for _ in range(burst)]
        frame = json.dumps({"tasks": [[a, 0] for a in attempts]})
        began = time.perf_counter()
        await ws.send(frame)
        left = set(attempts)
        while left:
            left.difference_update(json.loads(await ws.recv())["results"])
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
async def worker_process(worker: str, plane: Plane, burst: int = 1,
                         ) -> AsyncIterator[tuple[Any, int]]:
    """A worker process of kind `worker` connected to `plane`, with a slot for each attempt
    of a `burst`: its first connection and its pid. It stops on the way out."""
    async with websockets.serve(plane.serve, "127.0.0.1", 0, compression=None) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        # The control plane never sends a worker more attempts than it has free slots: a
        # burst finds as many (a frame larger would take the reader's slower path, and be
        # declined in part).
        slots = max(100, burst)
        spawned = (shoal_worker(f"http://127.0.0.1:{port}", 1, slots) if worker == "shoal"
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
    async with child(str(HERE / "_floor.py"), "--worker", url) as proc:
        yield proc.pid


Steps = Callable[[Any, int, list[float] | None, int], Awaitable[None]]
STEPS: dict[str, Steps] = {"shoal": shoal_steps, "floor": floor_steps}


async def one_round(worker: str, steps: int, warm: int, burst: int = 1) -> Round:
    """A fresh worker process of kind `worker`: `warm` steps, then `steps` measured, each of
    `burst` attempts."""
    run = STEPS[worker]
    out = Round(worker, burst=burst)
    async with worker_process(worker, Plane(shoal=worker == "shoal"), burst) as (ws, pid):
        await run(ws, warm, None, burst)
        proc = psutil.Process(pid)
        with counted(out.steal):
            before = cpu_seconds(proc)
            await run(ws, steps, out.trips, burst)
            out.cpu = cpu_seconds(proc) - before
    return out


async def measure(steps: int, rounds: int, warm: int, burst: int = 1) -> list[Round]:
    """`rounds` rounds of each worker, taking turns (the first worker alternates too)."""
    out = []
    for r in range(rounds):
        for worker in (WORKERS if r % 2 == 0 else WORKERS[::-1]):
            out.append(await one_round(worker, steps, warm, burst))
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


def render(figures: dict[str, Any], steps: int, console: Console, burst: int = 1) -> None:
    """The table: each worker's figures, and what Shoal's adds."""
    shape = ("a chain's step" if burst == 1 else
             f"a fan-out's layer ({burst} attempts a frame, the round trip to the last result)")
    table = Table(title=f"A worker's side of {shape} (medians of each worker's rounds, "
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
    parser.add_argument("--steps", type=int, default=None,
                        help="steps a round (default 1,000, or 10,000 attempts' worth of bursts)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warm", type=int, default=None,
                        help="unmeasured steps first (default a fifth of --steps)")
    parser.add_argument("--burst", type=int, default=1,
                        help="attempts a step, in one frame (at most 256, a worker's slots): 1 is "
                             "W2's step, 100 what each of W1's two workers gets of its layer")
    args = parser.parse_args()
    steps = args.steps or (1000 if args.burst == 1 else max(10, 10_000 // args.burst))
    warm = steps // 5 if args.warm is None else args.warm
    if min(steps, args.rounds, args.burst) < 1 or warm < 0 or args.burst > 256:
        parser.error("--steps and --rounds must be at least 1, --burst 1 to 256, --warm at "
                     "least 0")
    rounds = uvloop.run(measure(steps, args.rounds, warm, args.burst))
    figures = summary(rounds)
    render(figures, steps, Console(width=120), args.burst)
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps({"steps": steps, "burst": args.burst, "figures": figures,
                                   "rounds": [{"worker": r.worker, **r.figures()}
                                              for r in rounds]}, indent=2))
    print(f"Results written to {RESULTS.relative_to(HERE.parent)}")


if __name__ == "__main__":
    main()
