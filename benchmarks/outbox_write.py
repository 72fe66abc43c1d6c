"""What keeping one result durable costs a worker: the outbox log (ADR 0016) beside the
one-file-per-result layout it replaced, measured in the same run on the same disk.

    .venv/bin/python benchmarks/outbox_write.py [--results N] [--size BYTES] [--dir PATH]

Each result is saved and then removed (its `ack`), one at a time, as along a chain of
subtasks: the baseline writes a temporary file, fsyncs it, renames it into place, fsyncs the
folder and later unlinks it; the log is `shoal.worker.outbox.Outbox` itself (what its `save`
and `remove` run on the worker's I/O thread, called directly, as the baseline is). Wall time
and this process's CPU time (user + kernel) per result are printed with their ratio to the
baseline. The folder defaults to one under the current directory, so the disk measured is the
one a worker's data folder would be on (not a tmpfs `/tmp`).
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.table import Table

from shoal.protocol import TaskResult
from shoal.worker.outbox import Outbox


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _file_per_result(folder: Path, results: list[TaskResult]) -> None:
    """The layout before ADR 0016: temporary file, fsync, rename, folder fsync; unlink."""
    folder.mkdir()
    for result in results:
        target = folder / f"{result.attempt_id}.json"
        tmp = folder / f".{target.name}.tmp"
        with tmp.open("wb") as handle:
            handle.write(result.model_dump_json().encode())
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        target.unlink()


def _log(folder: Path, results: list[TaskResult]) -> None:
    """The outbox log, one save and one removal at a time: the work `Outbox.save` and
    `Outbox.remove` hand to their I/O thread, called here directly as the baseline is."""
    outbox = Outbox(folder)
    for result in results:
        outbox._save_all([(result, result.model_dump_json())])
        outbox._remove_all([result.attempt_id])
    outbox.close()


def _measure(
    run: Callable[[Path, list[TaskResult]], None], folder: Path, results: list[TaskResult]
) -> tuple[float, float]:
    """Seconds of wall time and of CPU time that `run(folder, results)` took."""
    wall, cpu = time.perf_counter(), _cpu()
    run(folder, results)
    return time.perf_counter() - wall, _cpu() - cpu


def main() -> None:
    """Run both layouts twice, alternated, and print the better run of each."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--results", type=int, default=300)
    parser.add_argument("--size", type=int, default=400, help="bytes of output per result")
    parser.add_argument("--dir", type=Path, default=Path.cwd())
    args = parser.parse_args()
    results = [TaskResult(attempt_id=uuid.uuid4(), fence=1, status="succeeded",
                          output="x" * args.size) for _ in range(args.results)]
    best: dict[str, tuple[float, float]] = {}
    with tempfile.TemporaryDirectory(prefix="shoal-outbox-bench-", dir=args.dir) as name:
        root = Path(name)
        for round_ in range(2):
            base = _measure(_file_per_result, root / f"files-{round_}", results)
            log = _measure(_log, root / f"log-{round_}", results)
            for key, value in (("file per result (before)", base), ("log (ADR 0016)", log)):
                best[key] = min(best.get(key, value), value)
    table = Table(title=f"Outbox: one result saved and acknowledged, {args.results} times "
                        f"({args.size} bytes of output), folder on {args.dir}")
    for column in ("layout", "wall per result", "CPU per result", "wall ratio", "CPU ratio"):
        table.add_column(column, justify="left" if column == "layout" else "right")
    base_wall, base_cpu = best["file per result (before)"]
    for key, (wall, cpu) in best.items():
        n = args.results
        table.add_row(key, f"{wall / n * 1000:.3f} ms", f"{cpu / n * 1000:.3f} ms",
                      f"{wall / base_wall:.2f}", f"{cpu / base_cpu:.2f}")
    Console().print(table)


if __name__ == "__main__":
    main()
