"""`benchmarks/_steal.py` reads the host's share of the machine's CPU time from `/proc/stat`
around a run, says nothing where the machine does not say, and warns a reader when it was
high enough to move a ratio between two runs."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))

from _steal import CpuTimes, counted, cpu_times, describe

# user nice system idle iowait irq softirq steal guest guest_nice
LINE = "cpu  {user} 0 {system} {idle} 0 0 0 {steal} 0 0\ncpu0 1 0 1 1 0 0 0 0 0 0\n"


def stat(path: Path, *, user: int, system: int, idle: int, steal: int) -> Path:
    path.write_text(LINE.format(user=user, system=system, idle=idle, steal=steal))
    return path


def test_the_machine_wide_line_is_read(tmp_path: Path) -> None:
    times = cpu_times(stat(tmp_path / "stat", user=100, system=50, idle=800, steal=50))
    assert times == CpuTimes(steal=50, total=1000)
    assert times.stolen_since(CpuTimes(steal=50, total=1000)) == 0.0  # no time passed
    assert times.stolen_since(CpuTimes(steal=10, total=800)) == pytest.approx(0.2)


@pytest.mark.parametrize("text", ["", "intr 1 2 3\n", "cpu 1 2 3\n", "cpu 1 2 3 4 5 6 7 x\n"])
def test_a_machine_that_does_not_say_gives_nothing(tmp_path: Path, text: str) -> None:
    (tmp_path / "stat").write_text(text)
    assert cpu_times(tmp_path / "stat") is None
    assert cpu_times(tmp_path / "absent") is None


def test_a_block_adds_its_share_and_nothing_where_the_machine_is_silent(
        tmp_path: Path) -> None:
    path = stat(tmp_path / "stat", user=100, system=0, idle=900, steal=0)
    shares: list[float] = []
    with counted(shares, path):
        stat(path, user=160, system=20, idle=990, steal=30)  # 200 ticks, 30 of them stolen
    assert shares == [pytest.approx(0.15)]
    with counted(shares, tmp_path / "absent"):
        pass
    assert len(shares) == 1


def test_the_reader_is_told_and_warned_only_when_the_host_took_much() -> None:
    assert describe({"Shoal's": [], "the floor's": []}) is None
    quiet = describe({"Shoal's": [0.001, 0.004, 0.002], "the floor's": [0.0, 0.01],
                      "a peer's": []})
    assert quiet is not None
    assert "over Shoal's measured runs 0.2 % (at most 0.4 %)" in quiet
    assert "the floor's measured runs 0.5 % (at most 1.0 %)" in quiet
    assert "peer" not in quiet  # nothing said of runs the machine gave no figure for
    assert "run again" not in quiet
    busy = describe({"Shoal's": [0.001, 0.2], "the floor's": [0.0]})
    assert busy is not None
    assert "at most 20.0 %" in busy
    assert "run again" in busy
