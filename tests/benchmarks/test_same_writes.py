"""`benchmarks/same_writes.py` replays what Shoal wrote for a run and nothing else: replayed
on the database as it was before the run, a chain's transactions leave its task's rows as
Shoal left them, each step waiting for the result that triggered it, on SQLite and on
PostgreSQL, with the durable floor's worker process and with Shoal's own; and the recorder
leaves the process as it found it."""

from __future__ import annotations

import itertools
import sqlite3
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))

from _same_writes import Tx, replay_server
from _workloads import workloads
from same_writes import recorded_runs, target

from shoal.runtime import core, executes
from shoal.store.db import Database
from tests.conftest import POSTGRES_URL, require_service

TABLES = {"tasks": "id", "subtasks": "task_id", "attempts": "task_id", "events": "task_id"}


async def task_rows(on: Any, task_id: uuid.UUID) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the task `task_id` in a replay target's database, by table, in order."""
    rows: dict[str, list[tuple[Any, ...]]] = {}
    for table, key in TABLES.items():
        sql = f"SELECT * FROM {table} WHERE {key} = $1 ORDER BY 1"
        if hasattr(on, "db"):  # SQLite: ids are stored as 32 hex digits
            found = on.db.execute(sql.replace("$1", "?"), (task_id.hex,)).fetchall()
        else:
            found = await on.others.fetch(sql, task_id)
        rows[table] = [tuple(row) for row in found]
    return rows


def check_chain(txs: list[Tx], length: int) -> list[Tx]:
    """One batch a result (a chain's results come one by one), each dispatching the attempt
    whose result triggers the next; the steps."""
    steps = [tx for tx in txs if tx.triggers]
    assert len(steps) == length
    first = next(tx for tx in txs if tx.dispatches)
    assert not first.triggers  # the submission dispatches the root
    for before, after in itertools.pairwise([first, *steps]):
        assert after.triggers == [attempt for attempt, _ in before.dispatches]
    assert not steps[-1].dispatches
    return steps


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def test_a_replayed_chain_writes_what_shoal_wrote(kind: str, tmp_path: Path) -> None:
    if kind == "postgres":
        require_service(POSTGRES_URL, "PostgreSQL", "SHOAL_TEST_POSTGRES_URL")
    originals = (sqlite3.connect, sqlite3.dbapi2.connect, core.Runtime._process,
                 executes.Executes.send, Database.fetch_row_autocommit)
    work = workloads(quick=True, only="W2")[0]  # a chain of 50
    makespans, recorded, task_ids = await recorded_runs(kind, [work], 1, tmp_path, after=True)
    assert (sqlite3.connect, sqlite3.dbapi2.connect, core.Runtime._process,
            executes.Executes.send, Database.fetch_row_autocommit) == originals
    assert len(makespans["W2"]) == 1
    txs = recorded["W2"]
    steps = check_chain(txs, len(work.dag))
    if kind == "postgres":  # a step is the runtime's one self-committing statement (but
        # where a worker's heartbeat shared its batch: then the general path's transaction)
        assert sum(tx.autocommit for tx in steps) > len(steps) // 2
    task_id = task_ids["W2"]
    async with target(kind, tmp_path / "W2.after.db") as after:
        shoal = await task_rows(after, task_id)
    assert len(shoal["subtasks"]) == len(work.dag)
    assert len(shoal["attempts"]) == len(work.dag)
    for worker in ("floor", "shoal"):  # the durable floor's worker process, then Shoal's own
        async with target(kind, tmp_path / "W2.db") as on:
            assert (await task_rows(on, task_id))["tasks"] == []  # a copy from before the run
            async with replay_server(worker) as replay:
                assert await replay.run(txs, on, work.delay) > 0
            assert await task_rows(on, task_id) == shoal, worker
