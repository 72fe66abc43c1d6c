"""What a worker tells the control plane about its machine: identity, hardware and load.

Everything here blocks briefly (psutil, small files): call it through `asyncio.to_thread`.
"""

from __future__ import annotations

import contextlib
import os
import platform
import uuid
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped, unused-ignore]  # stubs: types-psutil

_GIB = 1024**3


def system_info(path: Path | None = None) -> dict[str, Any]:
    """The machine's OS, CPU, memory and Python; disk size of the volume holding `path`."""
    return {
        "os": f"{platform.system()} {platform.release()}".strip(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count() or 1,
        "memory_total_gb": round(float(psutil.virtual_memory().total) / _GIB, 1),
        "disk_total_gb": round(float(psutil.disk_usage(str(path or Path.cwd())).total) / _GIB, 1),
        "python": platform.python_version(),
    }


def resources(path: Path) -> tuple[float, float, float]:
    """CPU, memory and disk (of the volume holding `path`) use, in percent.

    CPU is measured since the previous call (psutil's non-blocking mode); the first call
    in a process reads 0.
    """
    cpu = float(psutil.cpu_percent(interval=None))
    memory = float(psutil.virtual_memory().percent)
    disk = float(psutil.disk_usage(str(_existing(path))).percent)
    return cpu, memory, disk


def load_machine_id(path: Path) -> str:
    """A stable id for this machine and worker, created once and kept in the file `path`."""
    try:
        existing = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        existing = ""
    if existing:
        return existing
    machine_id = uuid.uuid4().hex
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(machine_id + "\n", encoding="utf-8")
    return machine_id


def _cpu_model() -> str:
    """The CPU's marketing name where the OS tells it, else the architecture."""
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8") as handle:
        for line in handle:
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    return platform.processor() or platform.machine()


def _existing(path: Path) -> Path:
    """`path`, or its nearest ancestor that exists (disk_usage needs a real path)."""
    for candidate in (path, *path.absolute().parents):
        if candidate.exists():
            return candidate
    return Path.cwd()
