"""Simulated workers and watchers (`tests/load`) in processes of their own, for `bench_load.py`:
where their scripts are, warming a process up, and this process's memory and kernel time."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

SIM = Path(__file__).resolve().parents[1] / "tests" / "load"  # the simulated workers, watchers
WARM = 50  # connections opened and closed before memory's baseline: one-time costs paid first


async def warm_up(script: str, *args: str) -> None:
    """Connect WARM simulated workers or watchers (`script`), then close them: what the first
    connections of a process allocate once (code paths, caches) is not counted per
    connection."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(SIM / script), *args, "--count", str(WARM),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, limit=2**26)
    assert proc.stdin is not None
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 120)
    if not (line.startswith(b"connected") or line.startswith(b"subscribed")):
        raise RuntimeError(f"the warm-up connections did not open: {line!r}")
    proc.stdin.close()
    await proc.stdout.read()
    await asyncio.wait_for(proc.wait(), 120)


def rss_kb() -> int:
    """This process's resident set, in kB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def system_seconds() -> float:
    """This process's CPU time in the kernel so far (its system calls: a socket's send on
    loopback carries the receiving side's TCP work too)."""
    return os.times().system
