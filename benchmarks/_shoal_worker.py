"""Shoal's worker process driven by a benchmark's own server, with no control-plane logic:
the worker protocol's frames as the control plane sends them, and the process itself
(`_worker.py --untimed`: plain workers, without `bench_dag.py`'s stamps). Used by
`worker_roundtrip.py` and by the replay of the same writes (`_same_writes.py`), each with its
own server."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from shoal.protocol import SERVER_FEATURES, Registered

HERE = Path(__file__).resolve().parent

# A W2 step's `execute_task` as the control plane sends it (captured from a chain of
# `bench_dag.py`), its ids and delay set for each attempt.
STEP: dict[str, Any] = {
    "v": 1, "type": "execute_task", "attempt_id": "", "fence": 1, "task_id": "",
    "subtask_id": "", "role": "coder", "tool": "echo", "name": "c3",
    "instructions": "Overall task: benchmark W2: chain 200\n\nYour subtask: c3\nbenchmark "
                    "subtask c3\n\nWork in the current directory. Files produced by the "
                    "subtasks you depend on are already there. Write every file you create "
                    "inside this directory, using relative paths. When you are done, reply "
                    "with a short summary of what you did.",
    "upstream": [{"subtask_id": "", "name": "c2", "output": "ok", "files": []}],
    "timeout": 900.0, "options": {"privacy_level": "normal", "delay": 0.0, "seq": 1},
}


def execute_frame(attempts: Sequence[tuple[str, float]], task_id: str) -> str:
    """One `execute_tasks` frame: each of `attempts` (its id, its delay in seconds) as a W2
    step of task `task_id`, with a subtask of its own."""
    steps = [{**STEP, "attempt_id": attempt, "task_id": task_id,
              "subtask_id": str(uuid.uuid4()),
              "upstream": [{**STEP["upstream"][0], "subtask_id": str(uuid.uuid4())}],
              "options": {**STEP["options"], "delay": delay}}
             for attempt, delay in attempts]
    return json.dumps({"v": 1, "type": "execute_tasks", "tasks": steps})


def acks_frame(attempts: Sequence[str]) -> str:
    """The `acks` of `attempts`' results, as the control plane sends them."""
    return json.dumps({"v": 1, "type": "acks", "acks": [
        {"v": 1, "type": "ack", "attempt_id": a, "accepted": True} for a in attempts]})


def results_of(raw: str | bytes) -> list[str] | None:
    """The attempts a frame from the worker brings results of; None for any other frame (a
    heartbeat, say). A result that did not succeed (declined for want of a slot, say) stops the
    benchmark: it would time what no step does."""
    msg = json.loads(raw)
    results = ([msg] if msg.get("type") == "task_result" else
               msg["results"] if msg.get("type") == "task_results" else None)
    if results is None:
        return None
    for result in results:
        if result["status"] != "succeeded":
            raise RuntimeError(f"the worker answered {result['status']} for attempt "
                               f"{result['attempt_id']}: {result.get('error')}")
    return [result["attempt_id"] for result in results]


async def register(ws: Any) -> None:
    """Read a new connection's `worker_register` and answer `registered`, as the control
    plane does (no heartbeat within the hour)."""
    await ws.recv()
    await ws.send(Registered(worker_id=uuid.uuid4(), heartbeat_interval=3600, lease_seconds=3600,
                             features=list(SERVER_FEATURES)).model_dump_json())


@contextlib.asynccontextmanager
async def worker_process(url: str, workers: int, slots: int = 100) -> AsyncIterator[int]:
    """`_worker.py` with `workers` workers of `slots` slots dialling `url` (http://host:port),
    untimed (no stamps: this benchmark times them from outside); its pid. It stops on the way
    out."""
    with tempfile.TemporaryDirectory(prefix="shoal-bench-worker-") as name:
        tokens = ",".join(f"bench-{i}" for i in range(workers))
        async with child(str(HERE / "_worker.py"), "--url", url, "--slots", str(slots),
                         "--data-dir", str(Path(name) / "worker"),
                         "--records", str(Path(name) / "records.json"), "--uvloop", "--untimed",
                         env={**os.environ, "SHOAL_BENCH_TOKENS": tokens}) as proc:
            yield proc.pid


@contextlib.asynccontextmanager
async def child(*args: str, env: dict[str, str] | None = None,
                ) -> AsyncIterator[asyncio.subprocess.Process]:
    """This Python running `args`, a benchmark's worker process: stopped on the way out by
    closing its standard input (killed if it has not ended 30 s later)."""
    proc = await asyncio.create_subprocess_exec(sys.executable, *args,
                                                stdin=asyncio.subprocess.PIPE, env=env)
    try:
        yield proc
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), 30)
        except TimeoutError:
            proc.kill()
            await proc.wait()
