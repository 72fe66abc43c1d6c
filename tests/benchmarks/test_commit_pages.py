"""`benchmarks/commit_pages.py` measures what it says: each k's commit writes k pages to the
WAL, and a time comes back for every k."""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))

from commit_pages import PAGES, commit_times


def test_every_k_is_timed_and_writes_its_pages(tmp_path: Path) -> None:
    path = tmp_path / "pages.db"
    found = commit_times(path, commits=20)
    assert sorted(found) == list(PAGES)
    assert all(us > 0 for us in found.values())
    # One more commit of k updates puts k pages (and no more) in the WAL.
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.execute("BEGIN")
    for t in range(4):
        conn.execute(f"UPDATE t{t} SET v = 'y' WHERE id = 1")
    conn.execute("COMMIT")
    frames = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()[1]
    conn.close()
    assert frames == 4
