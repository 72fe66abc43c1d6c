"""`bench_dag.py --history TASKS`: that many tasks of W1's shape run, unmeasured, before the
measured runs, for Shoal and for the floor alike, so that a change whose cost grows with the
database's size shows; `trees.py` and `statement_cost.py` pass it on."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from _workloads import Workload
from bench_dag import history, parse_args
from trees import bench_argv


async def test_the_history_runs_w1_tasks_and_says_how_far_it_got(
        capsys: pytest.CaptureFixture[str]) -> None:
    ran: list[Workload] = []

    async def run(work: Workload) -> None:
        ran.append(work)

    await history(run, 250, "Shoal on sqlite")
    assert [w.key for w in ran] == ["W1"] * 250
    assert len(ran[0].dag) == 202  # the full size: one root, 200, one join
    assert capsys.readouterr().err.splitlines() == [
        f"history for Shoal on sqlite: {done} of 250 tasks" for done in (100, 200, 250)]
    await history(run, 0, "the floor on sqlite")
    assert len(ran) == 250
    assert capsys.readouterr().err == ""


def test_the_history_is_an_option_of_bench_dag_and_trees_passes_it_on() -> None:
    assert parse_args([]).history == 0
    with pytest.raises(SystemExit):
        parse_args(["--history", "-1"])
    given = argparse.Namespace(db="postgres", repeat=2, only="W1,W2", quick=False, history=500)
    argv = bench_argv(given)
    assert Path(argv[1]).name == "bench_dag.py"
    passed = parse_args(argv[2:])
    assert (passed.history, passed.db, passed.repeat, passed.only, passed.uvloop) == (
        500, "postgres", 2, "W1,W2", True)
