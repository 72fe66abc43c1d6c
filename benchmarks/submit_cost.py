"""What a task submission with a plan of its own costs the control plane, part by part, in one
process with no network: the body decoded and validated as the route receives it, the plan
checked as a graph, the task started by its workflow, its rows and events staged, and the
whole written to a fresh SQLite database, as `POST /api/v1/tasks` and the runtime's batch do.

    .venv/bin/python benchmarks/submit_cost.py [--repeat 30] [--only W1,W2]
    valgrind --tool=lackey --basic-counts=yes .venv/bin/python benchmarks/submit_cost.py \
        --once W1 --repeat 6                                # less a `--repeat 1` run: 5 of them

Each part is timed `--repeat` times on W1's and W2's plans (202 and 200 items, as
`bench_dag.py` submits them); prints the best and the median of each part in ms and, for the
whole, µs per subtask. The parts are the route's and the runtime's own functions, called in
their order; what the HTTP server, FastAPI's dependencies and the event loop add is not here
(`bench_dag.py`'s "submit → first start" has the whole).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import json
import pstats
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from _workloads import plan_for, workloads
from rich.console import Console
from rich.table import Table

from shoal.api.routes.tasks import _meta, _user_plan
from shoal.api.schemas.tasks import TaskCreate
from shoal.engine.inputs import Start
from shoal.engine.model import TaskRecord, TaskState
from shoal.engine.step import Context
from shoal.events import EventType, NewEvent
from shoal.states import TaskStatus
from shoal.store import accounts
from shoal.store.db import Database
from shoal.store.events import append_events_sync
from shoal.store.models import utcnow
from shoal.store.state import BatchWriter
from shoal.workflows import BUILTIN, decide

PARTS = ("decoded", "validated", "plan checked", "started", "staged", "written")


def body_of(items: list[dict[str, Any]]) -> bytes:
    """The request body `bench_dag.py` sends for this plan."""
    return json.dumps({"description": "benchmark", "plan": items, "quality": "off",
                       "checkpoint_frequency": "low"}).encode()


class Submission:
    """One submission, part by part; each part's seconds in `times`."""

    def __init__(self, db: Database, users: list[uuid.UUID]) -> None:
        self.db, self.users = db, users  # one each: a user's task holds their only slot
        self.times: dict[str, list[float]] = {part: [] for part in PARTS}
        self.counting = False  # the parts' Python calls instead of their times (`calls`)
        self.calls: dict[str, int] = {}
        self.doc = BUILTIN["dag"].model_dump(mode="json", by_alias=True)

    def _timed(self, part: str, fn: Callable[[], Any]) -> Any:
        if self.counting:
            return self._counted(part, fn)
        began = time.perf_counter()
        out = fn()
        self.times[part].append(time.perf_counter() - began)
        return out

    def _counted(self, part: str, fn: Callable[[], Any]) -> Any:
        profile = cProfile.Profile()
        out = profile.runcall(fn)
        self.calls[part] = pstats.Stats(profile).total_calls  # type: ignore[attr-defined]
        return out

    async def run(self, raw: bytes) -> None:
        parsed = self._timed("decoded", lambda: json.loads(raw))
        body = self._timed("validated", lambda: TaskCreate.model_validate(parsed))
        plan, options, _ = self._timed("plan checked", lambda: _user_plan(body, 500))
        now = utcnow()
        task = TaskRecord(id=uuid.uuid4(), user_id=self.users.pop(), description=body.description,
                          status=TaskStatus.PENDING, created_at=now, updated_at=now,
                          workflow="dag", checkpoint_frequency=body.checkpoint_frequency,
                          meta=replace(_meta(body), workflow=self.doc))
        old = TaskState(task=task, subtasks={}, attempts={})
        made = self._timed("started", lambda: decide(
            old, Start(plan=plan, options=options, slot=1), Context(now=now)))
        events = [NewEvent(EventType.TASK_CREATED, {"task_id": str(task.id)}, task_id=task.id,
                           user_id=task.user_id), *made.events]

        def stage() -> BatchWriter:
            writer = BatchWriter()
            writer.stage_new(old, made, owner_id=None, owner_expires_at=None)
            return writer
        writer = self._timed("staged", stage)

        def write(conn: Any) -> None:
            writer.flush(conn)
            append_events_sync(conn, events, now)
        began = time.perf_counter()
        if self.counting:
            await self.db.run_write(lambda conn: self._counted("written", lambda: write(conn)),
                                    inline=True)
            return
        await self.db.run_write(write, inline=True)  # as the runtime's batch writes
        self.times["written"].append(time.perf_counter() - began)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--only", default="W1,W2")
    parser.add_argument("--once", choices=["W1", "W2"],
                        help="make `--repeat` submissions of this plan and print nothing (for "
                             "valgrind: two counts' difference over their submissions' is one "
                             "submission's instructions)")
    args = parser.parse_args()
    if args.once:
        (work,) = workloads(quick=False, only=args.once)
        with tempfile.TemporaryDirectory() as folder:
            asyncio.run(submitted(Path(folder), body_of(plan_for(work.dag, 0.0)), args.repeat))
        return
    chosen = workloads(quick=False, only=args.only)
    table = Table(title="A submission's parts: ms (best / median), Python calls a subtask",
                  title_justify="left")
    table.add_column("part")
    for w in chosen:
        table.add_column(f"{w.key} ({len(w.dag)} items)", justify="right")
        table.add_column("calls", justify="right")
    results: list[tuple[dict[str, list[float]], dict[str, int]]] = []
    for w in chosen:
        with tempfile.TemporaryDirectory() as folder:
            results.append(asyncio.run(measure(Path(folder), body_of(plan_for(w.dag, 0.0)),
                                               args.repeat)))
    for part in (*PARTS, "all"):
        cells: list[str] = []
        for (times, calls), w in zip(results, chosen, strict=True):
            cells += [f"{min(times[part]) * 1e3:.2f} / {statistics.median(times[part]) * 1e3:.2f}",
                      f"{calls[part] / len(w.dag):.1f}"]
        table.add_row(part, *cells)
    table.add_row("all, µs a subtask (median)", *[cell for (times, _), w in zip(
        results, chosen, strict=True) for cell in (
        f"{statistics.median(times['all']) * 1e6 / len(w.dag):.0f}", "")])
    Console().print(table)


async def submitted(folder: Path, raw: bytes, count: int) -> None:
    """`count` submissions of `raw` on a fresh database, untimed."""
    db = Database.connect(f"sqlite+aiosqlite:///{folder / 'shoal.db'}")
    await db.migrate()
    async with db.begin() as conn:
        users = [await accounts.create_user(conn, username=f"bench{n}", password_hash="x",
                                            is_admin=False, email=None, now=utcnow())
                 for n in range(count)]
    sub = Submission(db, users)
    for _ in range(count):
        await sub.run(raw)
    await db.dispose()


async def measure(folder: Path, raw: bytes,
                  repeat: int) -> tuple[dict[str, list[float]], dict[str, int]]:
    """The parts' seconds over `repeat` submissions of `raw` (after three unmeasured), and
    their Python calls in one more (under cProfile: the count repeats run to run)."""
    db = Database.connect(f"sqlite+aiosqlite:///{folder / 'shoal.db'}")
    await db.migrate()
    async with db.begin() as conn:
        users = [await accounts.create_user(conn, username=f"bench{n}", password_hash="x",
                                            is_admin=False, email=None, now=utcnow())
                 for n in range(repeat + 4)]
    sub = Submission(db, users)
    gc.collect()
    for _ in range(3):
        await sub.run(raw)
    sub.times = {part: [] for part in PARTS}
    for _ in range(repeat):
        await sub.run(raw)
    sub.counting = True
    await sub.run(raw)
    await db.dispose()
    times = dict(sub.times)
    times["all"] = [sum(parts) for parts in zip(*(sub.times[p] for p in PARTS), strict=True)]
    return times, {**sub.calls, "all": sum(sub.calls.values())}


if __name__ == "__main__":
    main()
