"""`make bench`'s comparison (`benchmarks/bench_peers.py`) without the peers' virtualenv: the
table's figures and ratios from known makespans, a peer's JSON line read into its row (or the
reason it did not run), and Shoal through the API — a real `shoal serve` process, a worker
process and a client following the SSE stream — at a tiny size."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
from rich.console import Console

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from _api import api_row
from _compare import Role, Row, cells, figures, summary, table
from _peers import Paired, read_result
from _workloads import Workload, chain, fan_out

W1 = Workload("W1", "1→4→1", fan_out(4), 0.0)  # 6 subtasks
W3 = Workload("W3", "chain 2, 50 ms", chain(2), 0.05, layers=2)  # critical path 0.1 s


def rows() -> list[Row]:
    return [
        Row("api", Role.API, {"W1": [0.030, 0.012, 0.018], "W3": [0.2]}),
        Row("inside", Role.IN_PROCESS, {"W1": [0.006], "W3": [0.15]}),
        Row("floor", Role.FLOOR, {"W1": [0.003], "W3": [0.1]}),
        Row("peer", Role.PEER, {"W1": [0.036], "W3": [0.4]}, note="peer 1.0"),
        Row("broken", Role.PEER, failed="ImportError: no module named peer"),
        Row("same", Role.SAME_WRITES, {"W1": [0.004]}),  # not measured on W3
        Row("same + worker", Role.SAME_WRITES_WORKER, {"W1": [0.005]}),
    ]


def test_figures_are_ratios_to_the_floor_and_to_shoal_through_the_api() -> None:
    every = rows()
    api, inside, floor, peer, _, _, worker = every
    assert figures(W1, api, every).makespan == pytest.approx(0.018)  # the median of three
    assert figures(W1, api, every).headline == pytest.approx(3.0)  # 18 ms / 6 subtasks
    assert figures(W1, peer, every).over_floor == pytest.approx(12.0)
    assert figures(W1, peer, every).api_lead == pytest.approx(2.0)  # Shoal twice as fast
    assert figures(W3, peer, every).headline == pytest.approx(4.0)  # 0.4 s / 0.1 s path
    assert figures(W3, floor, every).api_lead == pytest.approx(0.5)
    assert figures(W1, inside, every).over_same == pytest.approx(1.5)  # 6 ms ÷ 4 ms
    assert math.isnan(figures(W3, inside, every).over_same)
    # The same writes with Shoal's worker: a row beside the others, over the floor and the
    # same writes with the floor's worker; the same writes' reference stays that row.
    assert figures(W1, worker, every).over_floor == pytest.approx(5 / 3)
    assert figures(W1, worker, every).over_same == pytest.approx(1.25)


def test_a_row_that_did_not_run_says_why_and_the_others_are_unaffected() -> None:
    every = rows()
    assert cells(W1, every[4], every)[-1] == "did not run: ImportError: no module named peer"
    assert cells(W1, every[3], every) == ["36 ms", "6 ms", "12.00x", "9.00x", "2.00x",
                                          "peer 1.0"]
    assert cells(W3, every[1], every)[3] == "—"  # no same-writes figure for W3
    without_api = every[1:]
    assert math.isnan(figures(W1, every[3], without_api).api_lead)
    assert cells(W1, every[3], without_api)[4] == "—"
    doc = summary([W1, W3], every)
    assert doc["broken"] == {"role": "PEER", "note": "", "failed": every[4].failed,
                             "steal": [], "workloads": {}}
    console = Console(width=200, record=True)
    console.print(table("sqlite", [W1, W3], every, 3))
    text = console.export_text()
    assert "did not run: ImportError" in text
    assert text.count("12.00x") == 1


def test_a_peers_json_line_fills_its_row_or_gives_the_reason() -> None:
    line = (b'noise\n{"peer": "p", "versions": {"p": "1.0", "q": "missing"}, "notes": ["fast"],'
            b' "results": {"W1": {"seconds": [0.5, 0.25], "n": 6}}}\n')
    row = read_result(Row("p", Role.PEER), line, b"")
    assert (row.seconds, row.note, row.failed) == ({"W1": [0.5, 0.25]}, "p 1.0; fast", "")
    failed = read_result(Row("p", Role.PEER), b'{"versions": {}, "error": "OSError: x"}\n', b"")
    assert failed.failed == "OSError: x"
    silent = read_result(Row("p", Role.PEER), b"", b"Traceback\nModuleNotFoundError: celery\n")
    assert silent.failed == "no result: ModuleNotFoundError: celery"


@pytest.mark.e2e
@pytest.mark.timeout(240)
async def test_shoal_through_the_api_runs_each_workload_to_completion() -> None:
    turns: list[str] = []

    async def between(work: Workload) -> None:  # where a paired peer runs the same workload
        turns.append(work.key)

    row = await api_row("sqlite", [W1, W3], repeat=2, between=between)
    assert turns == ["W1", "W3", "W1", "W3"]  # each of Shoal's runs, then the peer's turn
    assert row.role is Role.API
    assert [len(row.seconds[k]) for k in ("W1", "W3")] == [2, 2]
    assert min(row.seconds["W3"]) >= W3.critical_path  # two 50 ms subtasks, one after the other
    assert all(0 < s < 60 for s in row.seconds["W1"])
    # Each process's CPU a subtask, each run: the server and the worker did the work.
    assert {name: len(runs) for name, runs in row.cpu["W1"].items()} == {
        "serve": 2, "worker": 2, "client": 2}
    assert min(row.cpu["W1"]["serve"]) > 0
    assert min(row.cpu["W1"]["worker"]) > 0


async def test_a_paired_peer_that_cannot_run_says_why_without_running() -> None:
    """The peers taking turns with Shoal (LangGraph, on each database) get a row each; when
    their virtualenv could not be made, each row says why and nothing runs."""
    paired = Paired("sqlite", quick=True)
    assert [p.label for p in paired.peers] == ["LangGraph + SQLite checkpointer"]
    paired.broken = "installing the peers failed: no network"
    await paired.run(W1)
    (row,) = paired.rows.values()
    assert (row.role, row.seconds, row.failed) == (Role.PEER, {}, paired.broken)
    assert [p.label for p in Paired("postgres", quick=True).peers] == [
        "LangGraph + PostgreSQL checkpointer"]


def test_the_api_rows_cpu_is_in_its_note_and_its_json() -> None:
    every = rows()
    every[0].cpu = {"W1": {"serve": [800.0, 700.0, 900.0], "worker": [250.0], "client": []}}
    assert cells(W1, every[0], every)[-1] == "CPU a subtask: serve 800 µs, worker 250 µs"
    assert cells(W3, every[0], every)[-1] == ""
    every[0].note = "shoal serve"
    assert cells(W1, every[0], every)[-1] == ("shoal serve; CPU a subtask: serve 800 µs, "
                                              "worker 250 µs")
    doc = summary([W1, W3], every)
    api = doc["api"]
    assert isinstance(api, dict)
    assert api["workloads"]["W1"]["cpu_us_per_subtask"] == {"serve": 800.0, "worker": 250.0}
    assert api["workloads"]["W3"]["cpu_us_per_subtask"] == {}


def test_make_bench_passes_every_option_of_bench_dag_it_does_not_take() -> None:
    """`bench_peers.py` runs `bench_dag.bench_database`, which reads `bench_dag.py`'s options:
    each one `bench_peers.py` does not take comes with `bench_dag.py`'s default (an option
    added there once broke `make bench`), and its own are as given."""
    import bench_dag
    import bench_peers

    ours, theirs = bench_peers.parse_args(["--db", "sqlite", "--quick"]), bench_dag.parse_args([])
    assert set(vars(theirs)) <= set(vars(ours))
    assert {name: getattr(ours, name) for name in vars(theirs)
            if name not in ("db", "quick", "repeat")} == {
        name: value for name, value in vars(theirs).items()
        if name not in ("db", "quick", "repeat")}
    assert (ours.db, ours.quick, ours.repeat, ours.no_peers) == ("sqlite", True, 1, False)
