"""The layers, as `pyproject.toml`'s import-linter contracts: the engine pure, workflows on the
engine alone, the control plane and the worker apart, and no import cycle anywhere."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[1]


def test_every_import_contract_is_kept() -> None:
    done = subprocess.run([str(Path(sys.executable).with_name("lint-imports")), "--no-cache"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout, done.stdout[-4000:]
