"""`benchmarks/statement_cost.py` times Shoal's SQLite writes statement by statement inside
its run and replayed alone: every statement and commit of a recorded chain has its time, the
replay runs exactly those statements, and each replayed commit's WAL frames are counted."""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))

from _same_writes import RECORDING, Recorder, Tx
from _workloads import workloads
from statement_cost import COMMIT, inside_shoal, kind_of, measure, replay_alone, rows_of, table


def test_kinds_and_rows_are_read_off_the_statements() -> None:
    assert kind_of('INSERT INTO "events" (type, data) VALUES (?, ?)') == "INSERT INTO events"
    assert kind_of("UPDATE subtasks SET status=? WHERE subtasks.id = ?") == "UPDATE subtasks"
    assert kind_of("insert or replace into t (a) values (?)") == "INSERT OR REPLACE INTO t"
    assert kind_of("PRAGMA user_version = 3") == "PRAGMA user_version ="
    assert rows_of("INSERT INTO e (a, b) VALUES (?, ?), (?, ?) RETURNING seq", [1, 2, 3, 4],
                   False) == 2
    assert rows_of("UPDATE t SET a = ? WHERE id = ?", [[1, 2], [3, 4], [5, 6]], True) == 3
    assert rows_of("DELETE FROM t WHERE id = ?", [1], False) == 1


def test_the_recorder_times_each_statement_and_commit(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / "t.db", factory=Recorder)
    db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
    db.commit()
    with RECORDING.recording() as txs:
        db.execute("INSERT INTO t (v) VALUES (?)", ("a",))
        db.execute("SELECT count(*) FROM t").fetchall()  # read: not kept, not timed
        db.executemany("UPDATE t SET v = ? WHERE id = ?", [("b", 1)])
        db.commit()
        db.commit()  # nothing pending: no transaction, and its time goes nowhere
        db.cursor().execute("INSERT INTO t (v) VALUES (?)", ("c",))
        db.execute("COMMIT")
    db.close()
    assert [len(tx.statements) for tx in txs] == [2, 1]
    for tx in txs:
        assert len(tx.seconds) == len(tx.statements)
        assert all(s > 0 for s in tx.seconds)
        assert tx.commit_seconds is not None
        assert tx.commit_seconds > 0


def test_a_replayed_statement_and_its_frames(tmp_path: Path) -> None:
    path = tmp_path / "r.db"
    setup = sqlite3.connect(path)
    setup.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
    setup.commit()
    setup.close()
    tx = Tx([("INSERT INTO t (v) VALUES (?)", ["x" * 5000], False),
             ("UPDATE t SET v = ? WHERE id = ?", [["y", 1]], True)])
    seconds, frames = replay_alone(path, [tx, tx], between=100)
    assert set(seconds) == {"INSERT INTO t", "UPDATE t", COMMIT}
    assert all(s > 0 for s in seconds.values())
    assert len(frames) == 2
    assert all(f >= 2 for f in frames)  # a page and its overflow
    check = sqlite3.connect(path)
    assert check.execute("SELECT count(*) FROM t").fetchone()[0] == 2
    check.close()


async def test_a_chain_inside_shoal_and_alone() -> None:
    work = workloads(quick=True, only="W2")[0]  # a chain of 50
    [costs] = await measure([work], repeat=2, between=0)
    assert costs.transactions > len(work.dag)  # the submission, then a step each
    assert costs.count[COMMIT] == costs.transactions
    assert costs.count["INSERT INTO attempts"] == len(work.dag)  # one dispatch a step
    assert costs.rows["INSERT INTO subtasks"] == len(work.dag)  # all at the submission
    for kind in costs.count:
        assert costs.inside[kind] > 0
        assert len(costs.alone[kind]) == 2
        assert min(costs.alone[kind]) > 0
    assert len(costs.frames) == costs.transactions
    assert min(costs.frames) >= 1
    rendered = table(work, costs, 2, 0)
    assert rendered.row_count == len(costs.count) + 1  # each kind, the commits, and "all"
    assert RECORDING.on is False


def test_a_recording_without_times_is_refused() -> None:
    tx = Tx([("INSERT INTO t (v) VALUES (?)", ["x"], False)])  # as PostgreSQL's are kept
    with pytest.raises(RuntimeError, match="no times"):
        inside_shoal([tx])


def test_a_failed_commit_is_no_transaction_and_the_times_stay_in_line(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / "f.db", factory=Recorder)
    db.execute("PRAGMA foreign_keys=ON")
    db.execute("CREATE TABLE p (id INTEGER PRIMARY KEY)")
    db.execute("CREATE TABLE c (id INTEGER PRIMARY KEY, p INTEGER REFERENCES p(id) "
               "DEFERRABLE INITIALLY DEFERRED)")
    db.commit()
    with RECORDING.recording() as txs:
        db.execute("INSERT INTO c (p) VALUES (?)", (7,))  # no such parent: the commit fails
        with pytest.raises(sqlite3.IntegrityError):
            db.commit()
        db.rollback()
        db.execute("INSERT INTO p (id) VALUES (?)", (1,))
        db.execute("INSERT INTO c (p) VALUES (?)", (1,))
        db.commit()
    db.close()
    [last] = txs  # the transaction whose commit failed did not happen
    assert len(last.statements) == 2
    assert len(last.seconds) == 2
    assert last.commit_seconds is not None
