"""What the tests of the deployable stack share: where its files are, and the tools that check
them (Debian's docker-compose and haproxy, installed by `make deploy-tools`)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conftest import IN_CI

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"


def require_binary(name: str, package: str) -> str:
    """The path of `name` (also looked for in /usr/sbin); skip without it, fail under CI."""
    found = shutil.which(name) or next(
        (str(p) for p in (Path("/usr/sbin") / name, Path("/usr/bin") / name) if p.is_file()),
        None)
    if found:
        return found
    message = (f"`{name}` is not installed: run `make deploy-tools` (as root it installs "
               f"Debian's `{package}` package with apt-get) to run this check.")
    if IN_CI:
        pytest.fail(message)
    pytest.skip(message)
