"""`benchmarks/trees.py` alternates two source trees run by run and says, per workload and
figure, how B compares with A: over every pair, and over the pairs the host left quiet.
`benchmarks/cython_tree.py` chooses the hot path's modules it can compile as they are and
finds the compiled module to blame when the built tree does not import (ADR 0056)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))

from cython_tree import Build, chosen, culprit, first_error
from trees import order, read_run, summary, tree_of

SRC = Path(__file__).parents[2] / "src"


def doc(shoal: float, cpu: float, steal: float) -> dict[str, Any]:
    """A `bench_dag.py` JSON with one workload, as the benchmark writes it."""
    return {"databases": {"sqlite": {
        "seconds": 12.5,
        "W2": {"shoal": shoal, "floor": 0.5, "ratio_vs_floor": shoal / 0.5,
               "control_plane_cpu_ms_per_subtask": cpu, "worker_cpu_ms_per_subtask": None,
               "steal": {"shoal": [steal, steal, 0.0], "floor": [0.0]}},
        "commit_floor_ms": {"count": 200, "p50": 0.03},
        "dispatch_latency": {"count": 597, "p50": 1.4, "passed": True},
    }}}


def test_a_run_is_read_from_the_benchmarks_json() -> None:
    run = read_run(doc(1.5, 1.2, 0.05), "sqlite", 0, "A")
    assert list(run.figures) == ["W2"]  # the database's other entries are not workloads
    assert run.figures["W2"] == {"shoal": 1.5, "floor": 0.5, "ratio_vs_floor": 3.0,
                                 "control_plane_cpu_ms_per_subtask": 1.2}  # None: not given
    assert run.steal["W2"] == 0.05  # the higher of Shoal's and the floor's medians


def test_the_trees_take_turns_at_going_first() -> None:
    assert [order(pair) for pair in range(3)] == [("A", "B"), ("B", "A"), ("A", "B")]


def test_b_against_a_pair_by_pair_and_over_the_quiet_pairs() -> None:
    steps = [(2.0, 1.6, 0.0), (1.0, 1.1, 0.0), (3.0, 1.5, 0.30)]  # A, B, the pair's steal
    runs = [read_run(doc(a, a, 0.0), "sqlite", pair, "A") for pair, (a, _, _) in
            enumerate(steps)]
    runs += [read_run(doc(b, b, steal), "sqlite", pair, "B") for pair, (_, b, steal) in
             enumerate(steps)]
    runs.append(read_run(doc(9.0, 9.0, 0.0), "sqlite", 7, "A"))  # a pair never finished
    line = next(x for x in summary(runs) if x.metric == "shoal")
    assert (line.a, line.b) == (2.0, 1.5)  # each tree's median
    assert line.ratio == pytest.approx(0.8)  # the median of 0.8, 1.1 and 0.5
    assert (line.lower, line.pairs) == (2, 3)
    assert line.quiet == 2  # the third pair ran under 30 % steal
    assert line.quiet_ratio == pytest.approx((0.8 + 1.1) / 2)
    assert {x.metric for x in summary(runs)} == {
        "shoal", "floor", "ratio_vs_floor", "control_plane_cpu_ms_per_subtask"}


def test_no_whole_pair_says_nothing() -> None:
    assert summary([read_run(doc(1.0, 1.0, 0.0), "sqlite", 0, "A")]) == []


def test_a_tree_must_hold_the_package(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="no shoal package"):
        tree_of(str(tmp_path))
    assert tree_of(str(SRC)) == SRC.resolve()


def test_the_hot_path_is_chosen_without_what_cannot_compile_as_it_is() -> None:
    package = SRC / "shoal"
    names = {path.relative_to(package).as_posix() for path in chosen(package)}
    assert {"runtime/core.py", "store/state.py", "engine/step.py", "events.py",
            "api/fanout.py"} <= names
    assert not any(name.endswith("__init__.py") for name in names)
    assert "store/models.py" not in names
    # A compiled method is not a function to pydantic, which takes it for a field; FastAPI
    # reads its routes' signatures.
    assert not {"workflows/stages.py", "runtime/relay.py", "api/worker_ws.py"} & names
    assert "api/app.py" not in names  # not on the hot path


def test_cythons_first_error_is_what_a_refusal_says() -> None:
    output = ("\nError compiling Cython file:\n-----\n...\n"
              "shoal/engine/graph.py:68:4: Structural pattern match is not yet implemented\n"
              "shoal/engine/graph.py:326:4: Structural pattern match is not yet implemented\n"
              "Traceback (most recent call last):\nCompileError: graph.py\n")
    assert first_error(output) == (
        "shoal/engine/graph.py:68:4: Structural pattern match is not yet implemented")
    assert first_error("something else\nwent wrong\n") == "went wrong"
    assert first_error("") == "no output"


def test_the_compiled_module_to_blame_for_a_failed_import() -> None:
    traceback = (
        'Traceback (most recent call last):\n  File "<string>", line 1, in <module>\n'
        '  File "shoal/runtime/core.py", line 57, in init shoal.runtime.core\n'
        '  File "shoal/runtime/commands.py", line 15, in init shoal.runtime.commands\n'
        '  File "/x/shoal/workflows/__init__.py", line 24, in <module>\n'
        "TypeError: something\n")
    build = Build(compiled=["runtime/core.py", "runtime/commands.py"])
    assert culprit(traceback, build) == "runtime/commands.py"  # the innermost
    assert culprit(traceback, Build(compiled=["events.py"])) is None
