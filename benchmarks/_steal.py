"""The host's share of this machine's CPU time while a benchmark ran ("steal", `/proc/stat`).

On a virtual machine the host runs other guests on the same cores; the time a vCPU wanted to
run and could not is counted as steal. A run made while the host took a fifth of the machine
takes far longer, and spends more CPU of its own, than the same run on a quiet host (issue
37's thirtieth round: a W2 step 1.5 ms at 0.2 % steal, 4.6 ms at 23 %), so a ratio between
two runs made under different steal says more about the host than about the code. The
benchmarks read it around each measured run and print it beside their figures.
"""

from __future__ import annotations

import contextlib
import statistics
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

STAT = Path("/proc/stat")
NOTED = 0.02  # steal above this share of the machine's time is worth a reader's notice


@dataclass(frozen=True, slots=True)
class CpuTimes:
    """The machine's CPU time so far, all CPUs together, in the kernel's ticks."""

    steal: int
    total: int  # user, nice, system, idle, iowait, irq, softirq and steal

    def stolen_since(self, before: CpuTimes) -> float:
        """The share of the machine's CPU time the host took between `before` and now (0 when
        no time passed)."""
        spent = self.total - before.total
        return (self.steal - before.steal) / spent if spent > 0 else 0.0


def cpu_times(stat: Path = STAT) -> CpuTimes | None:
    """The machine's CPU times from `stat` (`/proc/stat`'s first line, in ticks of usually 10
    ms: a run of 100 ms on two CPUs reads in steps of 5 %); None where there is no such file
    or it has no steal column (not Linux, or a kernel before 2.6.11)."""
    try:
        with stat.open() as lines:
            first = lines.readline().split()
    except OSError:
        return None
    if len(first) < 9 or first[0] != "cpu":
        return None
    try:
        ticks = [int(v) for v in first[1:9]]  # guest time is counted in user's already
    except ValueError:
        return None
    return CpuTimes(steal=ticks[7], total=sum(ticks))


@contextlib.contextmanager
def counted(shares: list[float], stat: Path = STAT) -> Iterator[None]:
    """Append to `shares` the host's share of the machine's CPU time over the `with` block;
    nothing where the machine does not say."""
    before = cpu_times(stat)
    yield
    after = cpu_times(stat)
    if before is not None and after is not None:
        shares.append(after.stolen_since(before))


def describe(runs: dict[str, list[float]]) -> str | None:
    """One line for a reader: the steal over each group of measured runs (say "Shoal's" and
    "the floor's": median and highest, per cent), and a warning where any passed `NOTED`,
    enough to move a ratio between them; None where the machine did not say."""
    said = {who: shares for who, shares in runs.items() if shares}
    if not said:
        return None
    parts = ", ".join(f"over {who} measured runs {100 * statistics.median(shares):.1f} % "
                      f"(at most {100 * max(shares):.1f} %)" for who, shares in said.items())
    line = f"Steal (the host's share of this machine's CPU time, /proc/stat) {parts}"
    if max(max(shares) for shares in said.values()) > NOTED:
        line += (f": above {100 * NOTED:.0f} %, wall-clock and CPU figures alike grow with it, "
                 "so a ratio between runs made under different steal may be the host's; run "
                 "again when it is quieter")
    return line + "."
