"""`benchmarks/worker_trees.py` runs Shoal's worker from two source trees in turn and says
which one costs less an attempt."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))

from worker_trees import alternate, first_on_path, summary

SRC = Path(__file__).parents[2] / "src"


def test_the_tree_goes_first_on_the_path_of_the_processes_started_meanwhile(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "shoal").mkdir()
    (tmp_path / "shoal" / "__init__.py").write_text("TREE = 'the other tree'\n")
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    with first_on_path(tmp_path):
        found = subprocess.run([sys.executable, "-c", "import shoal; print(shoal.TREE)"],
                               capture_output=True, text=True, check=True).stdout.strip()
        assert os.environ["PYTHONPATH"] == os.pathsep.join([str(tmp_path), "/elsewhere"])
    assert found == "the other tree"  # ahead of the editable install
    assert os.environ["PYTHONPATH"] == "/elsewhere"
    monkeypatch.delenv("PYTHONPATH")
    with first_on_path(tmp_path):
        assert os.environ["PYTHONPATH"] == str(tmp_path)
    assert "PYTHONPATH" not in os.environ


def test_the_summary_compares_the_trees_pair_by_pair() -> None:
    runs = [{"tree": "A", "pair": 0, "cpu_us": 100.0, "p50_us": 10.0},
            {"tree": "B", "pair": 0, "cpu_us": 80.0, "p50_us": 12.0},
            {"tree": "B", "pair": 1, "cpu_us": 90.0, "p50_us": 9.0},
            {"tree": "A", "pair": 1, "cpu_us": 100.0, "p50_us": 10.0},
            {"tree": "A", "pair": 2, "cpu_us": 50.0, "p50_us": 10.0},
            {"tree": "B", "pair": 2, "cpu_us": 60.0, "p50_us": 10.0}]
    figures = summary(runs)
    assert (figures["A"]["cpu_us"], figures["B"]["cpu_us"]) == (100.0, 80.0)
    assert figures["cpu_us_ratio"] == {"median": pytest.approx(0.9), "lower": 2, "pairs": 3}
    assert figures["p50_us_ratio"]["lower"] == 1


async def test_both_trees_run_in_turn() -> None:
    runs = await alternate({"A": SRC, "B": SRC}, pairs=2, steps=3, burst=5)
    assert [(r["tree"], r["pair"]) for r in runs] == [("A", 0), ("B", 0), ("B", 1), ("A", 1)]
    assert all(r["cpu_us"] > 0 and r["p50_us"] > 0 for r in runs)
