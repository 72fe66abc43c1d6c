"""Benchmark workers: real `Worker`s over WebSockets, in their own process, with a no-op tool.

Started by `bench_dag.py`, never by hand. Runs one `Worker` per token in `SHOAL_BENCH_TOKENS`
(comma-separated) on one event loop, each with `--slots` slots and a tool named `echo` that
returns at once (or sleeps `options["delay"]` seconds). Every attempt is timestamped with
`time.monotonic()` — CLOCK_MONOTONIC, one clock for every process on a Linux host, so the
parent can compare these times with its own:

- `recv`: the `execute_task` message was read and parsed (the worker "has it");
- `tool_start` / `tool_end`: the tool's `run` began and returned;
- `sent`: the `task_result` was handed to the socket, alone or in a `task_results` frame of
  `batch` results (its outbox write waits for a late ack);
- `cpu_recv` / `cpu_sent`: this process's CPU time (`time.process_time()`) at those moments;
- with `SHOAL_BENCH_STAMPS=1` in the environment (`step_timeline.py`), three more: `data`, the
  last bytes before the message reached the connection (`data_received`); `exec`, the executor
  took the attempt up; `deliver`, its result was handed to delivery.

With `--untimed` the workers are plain `Worker`s and the tool stamps nothing: Shoal's worker
as a user runs it, for the scripts that only time it from outside (`worker_roundtrip.py`,
`same_writes.py`); the records stay empty. When standard input closes (or reads `stop`), the
workers stop and the records are written as JSON to `--records`. Standard input also takes
`profile PATH` (cProfile the event loop's thread from now on; `PATH.on` is written once it is
on) and `unprofile PATH` (stop, and write the profile to PATH): `calls_per_subtask.py` counts
the worker process's calls with them.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import logging
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import structlog
from pydantic import BaseModel

from shoal.config import Settings
from shoal.protocol import ExecuteTask, TaskResult, TaskResults
from shoal.tools.base import ToolOutcome, ToolRun
from shoal.worker.agent import Worker, io_executor

Records = dict[uuid.UUID, dict[str, Any]]


class NoopTool:
    """The benchmark's tool: does nothing (or sleeps `delay` seconds) and succeeds."""

    name = "echo"  # plans pin `echo`; this stands in for it without the file-writing thread hop
    local = True
    version = "bench"

    def __init__(self, records: Records | None) -> None:
        self._records = records  # None: no stamps (`--untimed`)

    async def run(self, run: ToolRun) -> ToolOutcome:
        """Succeed at once, or after `options["delay"]` seconds."""
        entry = None if self._records is None else self._records.setdefault(run.attempt_id, {})
        if entry is not None:
            entry["tool_start"] = time.monotonic()
        delay = float(run.options.get("delay", 0) or 0)
        if delay > 0:
            await asyncio.sleep(delay)
        if entry is not None:
            entry["tool_end"] = time.monotonic()
        # A workflow document's role that must answer in JSON (a router, a reviewer) has the
        # answer as its prompt's first line (`bench_workflows.py`); anything else gets "ok".
        first = run.instructions.split("\n", 1)[0]
        return ToolOutcome(status="succeeded", output=first if first.startswith("{") else "ok")


class TimedWorker(Worker):
    """A `Worker` that notes when each `execute_task` arrives and each result leaves."""

    def __init__(self, *args: Any, records: Records, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._records = records

    def _begin(self, msg: ExecuteTask) -> None:
        entry = self._records.setdefault(msg.attempt_id, {})
        if ARRIVED[0]:
            entry["data"] = ARRIVED[0]
        entry.update(
            recv=time.monotonic(),
            cpu_recv=time.process_time(),
            task_id=str(msg.task_id),
            subtask_id=str(msg.subtask_id),
            name=msg.name,
            worker=self.name,
            upstream=len(msg.upstream),
        )
        super()._begin(msg)

    async def _send(self, message: BaseModel, text: str | None = None) -> bool:
        sent = await super()._send(message, text)
        results = ([message] if isinstance(message, TaskResult) else
                   message.results if isinstance(message, TaskResults) else [])
        if results:
            stamp = {"sent": time.monotonic(), "cpu_sent": time.process_time(),
                     "batch": len(results)}
            for result in results:
                self._records.setdefault(result.attempt_id, {}).update(stamp)
        return sent


ARRIVED = [0.0]  # when the connection last received bytes (with SHOAL_BENCH_STAMPS=1)


def stamp_steps(records: Records) -> None:
    """The stamps `step_timeline.py` asks for (`SHOAL_BENCH_STAMPS=1`): the worker's own
    functions wrapped, in this process only, so that a step's time splits at each hand-over."""
    from shoal.worker.connection import WorkerConnection
    from shoal.worker.delivery import Delivery
    from shoal.worker.executor import Executor

    received, execute, deliver = (WorkerConnection.data_received, Executor._execute,
                                  Delivery.deliver)

    def data_received(self: WorkerConnection, data: bytes) -> None:
        ARRIVED[0] = time.monotonic()
        received(self, data)

    async def executed(self: Executor, attempt: Any) -> TaskResult:
        records.setdefault(attempt.message.attempt_id, {})["exec"] = time.monotonic()
        return await execute(self, attempt)

    async def delivered(self: Delivery, result: TaskResult) -> None:
        records.setdefault(result.attempt_id, {})["deliver"] = time.monotonic()
        await deliver(self, result)

    WorkerConnection.data_received = data_received  # type: ignore[method-assign]
    Executor._execute = executed  # type: ignore[method-assign]
    Delivery.deliver = delivered  # type: ignore[method-assign]


def quiet_logs() -> None:
    """Warnings and errors only: the benchmark prints a table, not a log."""
    logging.basicConfig(level=logging.WARNING)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
                        cache_logger_on_first_use=True)  # as `shoal.logs` does


async def serve(args: argparse.Namespace) -> None:
    """Run the workers until standard input closes, then write the records."""
    tokens = [t for t in os.environ["SHOAL_BENCH_TOKENS"].split(",") if t]
    settings = Settings(mode="dev", data_dir=Path(args.data_dir), worker_slots=args.slots)
    records: Records = {}
    if os.environ.get("SHOAL_BENCH_STAMPS") == "1":
        stamp_steps(records)
    tool = NoopTool(None if args.untimed else records)
    workers = [
        Worker(args.url, token, settings, tools={"echo": tool}, name=f"bench-{i}",
               slots=args.slots) if args.untimed else
        TimedWorker(args.url, token, settings, tools={"echo": tool}, name=f"bench-{i}",
                    slots=args.slots, records=records)
        for i, token in enumerate(tokens)
    ]
    asyncio.get_running_loop().set_default_executor(io_executor(args.slots * len(workers)))
    async with asyncio.TaskGroup() as tg:
        for worker in workers:
            tg.create_task(worker.run())
        await obey_stdin()
        for worker in workers:
            worker.stop(grace=5)
    out = {str(aid): entry for aid, entry in records.items()}
    await asyncio.to_thread(Path(args.records).write_text, json.dumps(out))


async def obey_stdin() -> None:
    """Read commands until standard input closes or says `stop`: `profile PATH` starts
    cProfile on this thread (the event loop's, where every worker runs) and then writes
    `PATH.on`, so that the caller knows it is on; `unprofile PATH` stops it and writes what it
    saw to PATH (whole once it appears: written aside, then renamed)."""
    profile: cProfile.Profile | None = None
    while (line := (await asyncio.to_thread(sys.stdin.readline)).strip()) not in ("stop", ""):
        command, _, path = line.partition(" ")
        if command == "profile" and profile is None and path:
            profile = cProfile.Profile()
            profile.enable()
            await asyncio.to_thread(Path(f"{path}.on").touch)
        elif command == "unprofile" and profile is not None and path:
            profile.disable()
            aside = Path(f"{path}.part")
            await asyncio.to_thread(profile.dump_stats, aside)
            await asyncio.to_thread(aside.replace, path)
            profile = None


def main() -> None:
    """Parse arguments and serve."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", required=True)
    parser.add_argument("--slots", type=int, default=100)
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--records", required=True)
    parser.add_argument("--uvloop", action="store_true")
    parser.add_argument("--untimed", action="store_true",
                        help="plain workers, no stamps: the records stay empty")
    args = parser.parse_args()
    quiet_logs()
    if args.uvloop:
        import uvloop

        uvloop.run(serve(args))
    else:
        asyncio.run(serve(args))


if __name__ == "__main__":
    main()
