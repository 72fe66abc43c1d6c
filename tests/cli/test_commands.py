"""The real `shoal` command, run as subprocesses, each against a fresh data directory.

Starting the command costs seconds, so the module's commands start together in one fixture
and each test checks one of them.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from shoal.cli.base import worker_settings
from shoal.config import DEV_SECRET
from tests.cli.harness import Run, finish, start

USER_CREATE = ("user", "create", "--username", "u", "--password", "password123", "--admin")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    """Every command of this module, run concurrently where they are independent."""
    base = tmp_path_factory.mktemp("cli")
    started = {
        "token": start(base / "token", "token", "create", "--worker", "w1"),
        "user": start(base / "user", *USER_CREATE),
        "upgrade": start(base / "upgrade", "db", "upgrade"),
        "serve": start(base / "serve", "serve", "--port", "0", SHOAL_MODE="production"),
        "unreachable": start(base / "unreachable", "tasks", SHOAL_URL="http://127.0.0.1:9",
                             SHOAL_TOKEN="not-a-token"),
        "no_credentials": start(base / "no_credentials", "submit", "Build a thing"),
        "demo": start(base / "demo", "up", "--demo", "--port", "0"),
        "demo_supervisor": start(base / "demo_supervisor", "up", "--demo", "--port", "0",
                                 "--workflow", "supervisor"),
        "demo_nowhere": start(base / "demo_nowhere", "up", "--demo", "--workflow", "nowhere"),
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


def test_a_worker_needs_no_secret_key_in_production(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A worker signs and checks no tokens: production mode without SHOAL_SECRET_KEY is fine
    for it (a key of its own stands in), where `shoal serve` refuses to start."""
    monkeypatch.setenv("SHOAL_MODE", "production")
    monkeypatch.setenv("SHOAL_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("SHOAL_SECRET_KEY", raising=False)
    settings = worker_settings()
    assert settings.mode == "production"
    assert settings.secret_key != DEV_SECRET
    assert worker_settings().secret_key != settings.secret_key  # never a shared one


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


def test_up_demo_approves_checkpoints_and_ends(runs: dict[str, Run]) -> None:
    """`shoal up --demo` (what `make run` runs) approves its checkpoints itself and exits 0."""
    result = runs["demo"]
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "the demo approves it automatically" in result.stdout
    assert "shoal approve " in result.stdout
    assert re.search(r"^Task completed: [0-9a-f-]{36}$", result.stdout, re.MULTILINE)
    assert re.search(r"^  Files:   \S+\.zip \(\d+ files?\)$", result.stdout, re.MULTILINE)


def test_up_demo_runs_another_workflows_sample(runs: dict[str, Run]) -> None:
    """`shoal up --demo --workflow supervisor` (`make run WORKFLOW=supervisor`) runs seed 001's
    restaurant booking to the end and shows its result; an unknown workflow is refused."""
    result = runs["demo_supervisor"]
    assert result.returncode == 0, result.stdout + result.stderr
    assert "(supervisor workflow)" in result.stdout
    assert "the router named 'telephone'; running 'googlemap'" in " ".join(result.stdout.split())
    assert "Done by: googlemap, calendar, telephone." in result.stdout
    assert re.search(r"^Task completed: [0-9a-f-]{36}$", result.stdout, re.MULTILINE)
    assert re.search(r"^  Files:   \S+\.zip \(\d+ files?\)$", result.stdout, re.MULTILINE)
    refused = runs["demo_nowhere"]
    assert refused.returncode == 2
    assert "No sample for workflow 'nowhere'" in refused.stdout
