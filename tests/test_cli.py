"""The real `shoal` command, run as subprocesses, each against a fresh data directory.

Starting the command costs seconds, so the module's commands start together in one fixture
and each test checks one of them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

SHOAL = Path(sys.executable).with_name("shoal")
USER_CREATE = ("user", "create", "--username", "u", "--password", "password123", "--admin")


@dataclass(frozen=True)
class Run:
    """A finished command."""

    returncode: int
    stdout: str
    stderr: str
    data_dir: Path


def start(base: Path, *args: str, **env: str) -> tuple[subprocess.Popen[str], Path]:
    """Start `shoal *args` in dev mode with fast hashing on a data directory under `base`."""
    base.mkdir(parents=True, exist_ok=True)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SHOAL_")}
    full = {
        **clean,
        "SHOAL_DATA_DIR": str(base / "data"),
        "SHOAL_MODE": "dev",
        "SHOAL_BCRYPT_ROUNDS": "4",
        "NO_COLOR": "1",
        "COLUMNS": "200",
        **env,
    }
    proc = subprocess.Popen(
        [str(SHOAL), *args],
        env=full,
        cwd=base,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    return proc, base / "data"


def finish(started: tuple[subprocess.Popen[str], Path]) -> Run:
    """Wait for a command (at most a minute) and collect its output."""
    proc, data_dir = started
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    return Run(proc.returncode, out, err, data_dir)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    """Every command of this module, run concurrently where they are independent."""
    base = tmp_path_factory.mktemp("cli")
    started = {
        "token": start(base / "token", "token", "create", "--worker", "w1"),
        "user": start(base / "user", *USER_CREATE),
        "upgrade": start(base / "upgrade", "db", "upgrade"),
        "serve": start(base / "serve", "serve", "--port", "0", SHOAL_MODE="production"),
        "unreachable": start(base / "unreachable", "tasks", SHOAL_SERVER="http://127.0.0.1:9",
                             SHOAL_TOKEN="not-a-token"),
        "no_credentials": start(base / "no_credentials", "submit", "Build a thing"),
    }
    done = {"user": finish(started.pop("user"))}
    again = start(base / "user", *USER_CREATE)
    done |= {name: finish(proc) for name, proc in started.items()}
    done["user_again"] = finish(again)
    return done


def test_token_create_prints_only_the_token(runs: dict[str, Run]) -> None:
    """`shoal token create` prints one line: the worker token."""
    result = runs["token"]
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("shw_")
    assert len(lines[0]) > 20


def test_user_create_succeeds(runs: dict[str, Run]) -> None:
    """`shoal user create --admin` creates the account and says so."""
    result = runs["user"]
    assert result.returncode == 0, result.stderr
    assert "Created user u" in result.stdout
    assert "as admin" in result.stdout


def test_duplicate_user_fails_clearly(runs: dict[str, Run]) -> None:
    """Creating a taken username exits 1 with a message that names it, not a traceback."""
    result = runs["user_again"]
    assert result.returncode == 1
    assert "'u'" in result.stderr
    assert "already taken" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_db_upgrade_succeeds(runs: dict[str, Run]) -> None:
    """`shoal db upgrade` migrates a fresh database and reports it."""
    result = runs["upgrade"]
    assert result.returncode == 0, result.stderr
    assert "newest schema" in result.stdout
    assert (result.data_dir / "shoal.db").exists()


def test_serve_refuses_production_without_secret(runs: dict[str, Run]) -> None:
    """`shoal serve` in production mode without SHOAL_SECRET_KEY exits 2 naming the variable."""
    result = runs["serve"]
    assert result.returncode == 2
    assert "SHOAL_SECRET_KEY" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_unreachable_server_fails_clearly(runs: dict[str, Run]) -> None:
    """A client command against a server that is not there exits 1 and says what to do."""
    result = runs["unreachable"]
    assert result.returncode == 1
    assert "Cannot reach the control plane" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_submit_without_credentials_says_how_to_sign_in(runs: dict[str, Run]) -> None:
    """`shoal submit` with no session exits 1 and names the ways to get one."""
    result = runs["no_credentials"]
    assert result.returncode == 1
    assert "shoal up" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
