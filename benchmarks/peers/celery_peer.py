"""Celery: W1, W2 and W3 as canvases (chains and chords) on a Redis broker and a database backend.

    benchmarks/.peers-venv/bin/python benchmarks/peers/celery_peer.py --db sqlite|postgres
        --url PATH|URL [--quick] [--repeat N] [--only W1,W2] [--variant db|redis]

What is measured, so the comparison with Shoal is stated:

- The canvas: one task per subtask (`step`, immutable signatures `.si()`: a subtask sleeps
  `delay` in W3 and returns its name), composed wave by wave in depth order (`_workloads.levels`):
  a wave of one is a task, a wider wave a `group`, and the waves are `chain`ed, which Celery
  turns into chords (W1: root | chord(200 middles, join); W2: a chain of 200; W3: ten groups of
  20, each a chord's body after the one before). For W1, W2 and W3 each wave is exactly the set
  that becomes ready together (W3's layers all take 50 ms), so the makespan is the DAG's.
- Durability (`--variant db`, the default): the broker is Redis (`SHOAL_BENCH_REDIS_URL`,
  default `redis://127.0.0.1:6379/11`, a queue of this run's own); every task's result and
  state go to Celery's SQLAlchemy result backend on the same database as the others
  (`db+sqlite:///FILE`, or `db+postgresql+psycopg://…` on a fresh database): the durable record
  a Celery user reads. With that backend a chord's join waits through `celery.chord_unlock`,
  which first looks 1 s after the chord is sent (`chord.run`'s `countdown`, not a setting),
  then every `result_chord_retry_interval`, set here to 10 ms (1 s by default): so each chord
  costs at least 1 s, as it does for Celery's users on a database backend. Default
  acknowledgement (on receipt).
- `--variant redis`: the result backend is the same Redis, where chords join natively (a
  counter per chord, no polling) — Celery's fastest configuration, but only as durable as the
  Redis server's persistence (`appendonly`), which the table's row states.
- Workers: one `celery worker` process (thread pool of 100, as Shoal's benchmark workers have
  100 slots each) started before the clock, on the same machine.
- The clock: from `apply_async` in this (client) process until `AsyncResult.get` returns the
  last task's result, polled every 5 ms (the client's default is 500 ms).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _common import NOTES, Workload, emit, measure, parse_args, timed
from _workloads import levels
from celery import Celery, chain, group

PACKAGES = ["celery"]
REDIS_URL = os.environ.get("SHOAL_BENCH_REDIS_URL", "redis://127.0.0.1:6379/11")
QUEUE = os.environ.get("SHOAL_BENCH_CELERY_QUEUE", f"shoal-bench-peers-{os.getpid()}")
BACKEND = os.environ.get("SHOAL_BENCH_CELERY_BACKEND", "cache+memory://")

app = Celery("celery_peer", broker=REDIS_URL, backend=BACKEND)
app.conf.update(task_default_queue=QUEUE, result_chord_retry_interval=0.01,
                worker_hijack_root_logger=False, broker_connection_retry_on_startup=True,
                result_extended=False, worker_prefetch_multiplier=4)


@app.task(name="bench.step")
def step(name: str, delay: float) -> str:
    """One subtask: optionally sleep; its result (the name) goes to the result backend."""
    if delay:
        time.sleep(delay)
    return name


def canvas(work: Workload) -> Any:
    """`work`'s DAG as chained waves (groups where a wave is wider than one)."""
    parts = []
    for wave in levels(work.dag):
        sigs = [step.si(name, work.delay) for name in wave]
        parts.append(sigs[0] if len(sigs) == 1 else group(sigs))
    return chain(*parts)


def backend_url(kind: str, url: str, variant: str) -> str:
    """Celery's result-backend URL for a database of `kind` at `url` (or Redis)."""
    if variant == "redis":
        return REDIS_URL
    if kind == "sqlite":
        return f"db+sqlite:///{url}"
    return "db+" + url.replace("postgresql://", "postgresql+psycopg://", 1)


def start_worker(env: dict[str, str]) -> subprocess.Popen[bytes]:
    """`celery worker` on this module, thread pool of 100, quiet."""
    here = Path(__file__).resolve().parent
    return subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "celery_peer", "worker", "--pool", "threads",
         "--concurrency", "100", "--loglevel", "WARNING", "-Q", QUEUE, "--without-gossip",
         "--without-mingle", "--without-heartbeat"],
        cwd=here, env={**env, "PYTHONPATH": str(here)}, stdout=sys.stderr)


def wait_ready(proc: subprocess.Popen[bytes]) -> None:
    """Until the worker answers a ping (or fail if it exited)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"celery worker exited with {proc.returncode}")
        if app.control.ping(timeout=0.5):
            return
    raise RuntimeError("celery worker did not answer within 60 s")


async def main_async() -> dict[str, object]:
    args = parse_args(__doc__.split("\n")[0])
    backend = backend_url(args.db, args.url, args.variant)
    app.conf.update(result_backend=backend, result_expires=600)
    if args.variant == "redis":
        persisted = app.connection_for_write().default_channel.client.config_get("appendonly")
        NOTES.append(f"Redis appendonly={persisted.get('appendonly', '?')}: results only as "
                     "durable as that")
    else:
        NOTES.append("chords joined by polling (first look after 1 s)")
    env = {**os.environ, "SHOAL_BENCH_CELERY_QUEUE": QUEUE, "SHOAL_BENCH_CELERY_BACKEND": backend}
    proc = start_worker(env)
    try:
        wait_ready(proc)

        async def run_one(work: Workload) -> float:
            sig = canvas(work)
            start = time.perf_counter()
            result = sig.apply_async()
            result.get(timeout=300, interval=0.005)
            return timed(start)

        return await measure(args, run_one)
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        forget_queue()


def forget_queue() -> None:
    """Delete the keys this run left in Redis: its queue's, and the results and chord
    counters of the Redis backend (the database given by SHOAL_BENCH_REDIS_URL is the
    benchmark's own)."""
    client = app.connection_for_write().default_channel.client
    for pattern in (f"*{QUEUE}*", "celery-task-meta-*", "celery-taskset-meta-*"):
        for key in list(client.scan_iter(pattern)):
            client.delete(key)


if __name__ == "__main__":
    emit("celery", PACKAGES, main_async)
