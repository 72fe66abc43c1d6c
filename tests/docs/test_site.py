"""The documentation site builds with `mkdocs build --strict`: a broken link, a missing page or
a page left out of the nav fails the suite, as `make docs` would fail for a user."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    """`mkdocs build --strict` over docs/ ends without a warning."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-4000:]
    assert (tmp_path / "site" / "index.html").is_file()
