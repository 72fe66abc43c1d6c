"""What a page costs in a SQLite commit, as the control plane's writer commits (WAL,
`synchronous=NORMAL`, no automatic checkpoints): the price of an index or a table a step
touches, before anyone changes the schema to spare one.

    .venv/bin/python benchmarks/commit_pages.py [--commits N] [--dir PATH]

Each commit updates one row in each of k small tables (k pages, each with its statement), for
k = 1, 2, 4, 8 and 16; the median time of a commit is printed for each k, and the cost of a
page as the slope between k = 1 and k = 16. The WAL is truncated every 500 commits, as the
writer's own checkpoints keep it short. The folder defaults to one under the current directory,
so the disk measured is the one a control plane's data folder would be on.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

PAGES = (1, 2, 4, 8, 16)


def commit_times(path: Path, commits: int) -> dict[int, float]:
    """The median µs of a commit that writes k pages, for each k of `PAGES`."""
    conn = sqlite3.connect(path, isolation_level=None)
    for pragma in ("journal_mode=WAL", "synchronous=NORMAL", "wal_autocheckpoint=0"):
        conn.execute(f"PRAGMA {pragma}")
    for t in range(max(PAGES)):
        conn.execute(f"CREATE TABLE t{t} (id INTEGER PRIMARY KEY, v TEXT)")
        conn.execute(f"INSERT INTO t{t} VALUES (1, 'x')")
    out: dict[int, float] = {}
    for k in PAGES:
        times = []
        for i in range(commits):
            start = time.perf_counter_ns()
            conn.execute("BEGIN")
            for t in range(k):
                conn.execute(f"UPDATE t{t} SET v = ? WHERE id = 1", (str(i),))
            conn.execute("COMMIT")
            times.append(time.perf_counter_ns() - start)
            if i % 500 == 499:
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        out[k] = statistics.median(times) / 1000
    conn.close()
    return out


def main() -> None:
    """Print each k's median commit and the cost of a page."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commits", type=int, default=2000, help="commits for each k")
    parser.add_argument("--dir", type=Path, default=Path.cwd(), help="where the database goes")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        found = commit_times(Path(folder) / "pages.db", args.commits)
    lo, hi = min(PAGES), max(PAGES)
    print("  ".join(f"{k} page{'s' if k > 1 else ''}: {us:.1f} µs" for k, us in found.items()))
    print(f"a page with its statement: {(found[hi] - found[lo]) / (hi - lo):.1f} µs")


if __name__ == "__main__":
    main()
