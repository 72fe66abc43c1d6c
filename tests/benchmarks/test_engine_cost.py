"""`benchmarks/engine_cost.py` decides W1's and W2's graphs with the engine alone; with
`--after-idle` it times W2's decisions after pauses of the process, alternated task by task,
and refuses pauses it cannot compare with a clear message."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))

from engine_cost import after_idle, decisions, halt_polling, main, pauses, run, shape


def test_a_task_is_decided_subtask_by_subtask_after_its_start() -> None:
    items = shape("W2")
    spent = decisions(items)
    assert len(spent) == len(items) + 1  # the start, then each subtask's two decisions
    assert all(s >= 0 for s in spent)
    assert run(shape("W1")) > 0


def test_each_pause_gets_its_figure_and_back_to_back_is_one_of_them() -> None:
    found = after_idle([0.0, 0.05], repeat=1)
    assert list(found) == [0.0, 0.05]
    assert all(micro > 0 for micro in found.values())
    assert pauses("0, 0.2,1") == [0.0, 0.2, 1.0]
    for text, says in (("1,2", "one of them 0"), ("0,-1", "≥ 0"), ("0,1,1", "each once"),
                        ("0,x", "numbers")):
        with pytest.raises(argparse.ArgumentTypeError, match=says):
            pauses(text)


def test_bad_arguments_stop_with_a_message(monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    for argv, says in ((["--after-idle", "1,2"], "one of them 0"),
                       (["--repeat", "0"], "at least 1")):
        monkeypatch.setattr(sys, "argv", ["engine_cost.py", *argv])
        with pytest.raises(SystemExit) as stopped:
            main()
        assert stopped.value.code == 2
        assert says in capsys.readouterr().err


def test_halt_polling_says_whether_it_is_in_effect(tmp_path: Path) -> None:
    assert halt_polling(tmp_path) == "not known (no haltpoll module)"
    (tmp_path / "module/haltpoll/parameters").mkdir(parents=True)
    (tmp_path / "module/haltpoll/parameters/guest_halt_poll_ns").write_text("200000\n")
    cpuidle = tmp_path / "devices/system/cpu/cpuidle"
    cpuidle.mkdir(parents=True)
    (cpuidle / "current_driver").write_text("none\n")
    assert halt_polling(tmp_path) == (
        "200000 ns set, not in effect: the cpuidle driver is none, not haltpoll")
    (cpuidle / "current_driver").write_text("haltpoll\n")
    assert halt_polling(tmp_path) == "200000 ns"
    (tmp_path / "module/haltpoll/parameters/guest_halt_poll_ns").write_text("0\n")
    assert halt_polling(tmp_path) == "0 ns: an idle vCPU halts at once"
