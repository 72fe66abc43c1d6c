"""Where a W2 step's wall time goes, hand-over by hand-over: the chain of 200 run in-process
(`bench_dag.py`'s control plane, its worker process on uvloop), each step split at the moments
it passes from one part to the next, the medians in µs.

    .venv/bin/python benchmarks/step_timeline.py [--db sqlite|postgres] [--repeat N]

On the control plane the runtime's own functions are wrapped (a stamp on entry and return: a
microsecond or two each); on the worker, `_worker.py`'s stamps with `SHOAL_BENCH_STAMPS=1`.
Both use CLOCK_MONOTONIC (`time.monotonic()`), one clock for both processes. A step, from the
worker's result of subtask k leaving its socket to the result of k + 1 leaving it:

- result k reaches the control plane and is handed to the runtime (`Runtime.post_result`);
- the runtime's loop takes it up (`_process`), decides (the engine, the schedule) and writes
  (`Batch.commit`: the rows, the events and SQLite's commit);
- the `execute_task` of k + 1 is made and written (`Executes.send`);
- it reaches the worker's connection (`data_received`), the executor takes it up, the tool
  runs, and its result is written.

The worker stamps a result's `sent` once its write has returned: the first hand-over can be
a little below zero for a step whose result the control plane had already taken by then.

Wall time on a shared machine moves from run to run by more than most single changes are
worth: compare two trees in alternate runs, and their call counts (`calls_per_subtask.py`).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import uvloop
from _workloads import workloads
from bench_dag import cluster, quiet_logs
from rich.console import Console
from rich.table import Table

from shoal.runtime import batch, core, executes

Stamp = tuple[str, float, Any]
SEGMENTS = (  # (label, from, to): names of stamps, control plane's or worker's
    ("result k: worker's socket → handed to the runtime", "w.sent", "post"),
    ("→ the runtime's loop takes it up", "post", "process<"),
    ("decided: the engine, the schedule", "process<", "commit<"),
    ("written: rows, events, SQLite's commit", "commit<", "commit>"),
    ("→ the dispatch's message made", "commit>", "send<"),
    ("execute k + 1 made and written", "send<", "send>"),
    ("→ the worker's connection has it", "send>", "w.data"),
    ("→ the executor takes it up", "w.data", "w.exec"),
    ("→ the tool has run", "w.exec", "w.tool_end"),
    ("→ its result is handed to delivery", "w.tool_end", "w.deliver"),
    ("→ its result leaves the worker's socket", "w.deliver", "w.sent"),
)


def wrap(stamps: list[Stamp]) -> Callable[[], None]:
    """Stamp the control plane's hand-overs into `stamps` (this process only); returns what
    undoes it."""
    post = core.Runtime.post_result

    def posted(self: core.Runtime, conn: Any, msg: Any, *rest: Any) -> None:
        stamps.append(("post", time.monotonic(), str(msg.attempt_id)))
        post(self, conn, msg, *rest)

    wrapped: list[tuple[Any, str, Any]] = [(core.Runtime, "post_result", post)]
    core.Runtime.post_result = posted  # type: ignore[method-assign]
    for cls, name, tag, key in (
        (core.Runtime, "_process", "process", None),
        (batch.Batch, "commit", "commit", None),
        (executes.Executes, "send", "send",
         lambda args: [str(att.id) for _, att in args[0]]),
    ):
        wrapped.append((cls, name, getattr(cls, name)))
        setattr(cls, name, _stamped(getattr(cls, name), tag, key, stamps))

    def undo() -> None:
        for cls, name, fn in wrapped:
            setattr(cls, name, fn)

    return undo


def _stamped(fn: Callable[..., Any], tag: str, key: Callable[[tuple[Any, ...]], Any] | None,
             stamps: list[Stamp]) -> Callable[..., Any]:
    async def stamped(self: Any, *args: Any, **kwargs: Any) -> Any:
        stamps.append((f"{tag}<", time.monotonic(), key(args) if key else None))
        try:
            return await fn(self, *args, **kwargs)
        finally:
            stamps.append((f"{tag}>", time.monotonic(), None))

    return stamped


def segments(stamps: list[Stamp], records: dict[Any, dict[str, Any]]) -> dict[str, list[float]]:
    """Each step's time between hand-overs, seconds, for the steps whose every stamp is there:
    from the result of attempt k (`post`) through its batch to the send of attempt k + 1."""
    out: dict[str, list[float]] = {label: [] for label, _, _ in SEGMENTS}
    for i, (tag, at, key) in enumerate(stamps):
        if tag != "post":
            continue
        seen: dict[str, tuple[float, Any]] = {}
        for tag2, at2, key2 in stamps[i + 1:i + 12]:
            if tag2 == "post":
                break
            seen.setdefault(tag2, (at2, key2))
        done, sent = records.get(key) or {}, seen.get("send<", (0.0, None))[1]
        nxt = records.get(sent[0]) if sent else None
        if not nxt or "sent" not in done:
            continue
        when = {"post": at, "w.sent.k": done["sent"], **{t: v[0] for t, v in seen.items()},
                **{f"w.{k}": v for k, v in nxt.items() if isinstance(v, float)}}
        spans = []
        for label, start, end in SEGMENTS:
            a = when["w.sent.k"] if start == "w.sent" else when.get(start)
            b = when.get(end)
            if a is None or b is None:
                break
            spans.append((label, b - a))
        else:
            for label, span in spans:
                out[label].append(span)
    return out


async def measure(kind: str, repeat: int) -> tuple[dict[str, list[float]], int]:
    """W2 `repeat` times after a warm-up, split (`segments`); and its number of steps."""
    stamps: list[Stamp] = []
    records: dict[Any, dict[str, Any]] = {}
    work = workloads(quick=False, only="W2")[0]
    before = os.environ.get("SHOAL_BENCH_STAMPS")
    os.environ["SHOAL_BENCH_STAMPS"] = "1"  # the worker process's extra stamps
    undo = wrap(stamps)
    try:
        async with cluster(kind, uvloop=True, records=records) as bench:
            await bench.run(work)  # warm-up
            stamps.clear()
            for _ in range(repeat):
                await bench.run(work)
    finally:
        undo()
        if before is None:
            del os.environ["SHOAL_BENCH_STAMPS"]
        else:
            os.environ["SHOAL_BENCH_STAMPS"] = before
    return segments(stamps, records), len(work.dag)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    quiet_logs()
    spans, n = uvloop.run(measure(args.db, args.repeat))
    table = Table(title=f"A W2 step, hand-over by hand-over — {args.db} (µs, {args.repeat} runs "
                        f"of {n} steps)", title_justify="left")
    for col in ("from the last to", "steps", "p50", "p90"):
        table.add_column(col, justify="left" if col == "from the last to" else "right")
    total = 0.0
    for label, values in spans.items():
        if not values:
            continue
        ordered = sorted(values)
        p50 = statistics.median(ordered) * 1e6
        total += p50
        table.add_row(label, str(len(values)), f"{p50:,.0f}",
                      f"{ordered[int(len(ordered) * 0.9)] * 1e6:,.0f}")
    table.add_row("the medians' sum (about a step)", "", f"{total:,.0f}", "")
    Console().print(table)


if __name__ == "__main__":
    main()
