"""Shared fixtures: settings on a fresh data directory, SQLite and PostgreSQL databases."""

from __future__ import annotations

import hashlib
import os
import socket
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from urllib.parse import urlparse

import pytest
import sqlalchemy as sa
from redis import asyncio as aioredis

from shoal.config import Settings
from shoal.store.db import Database

POSTGRES_URL = os.environ.get("SHOAL_TEST_POSTGRES_URL",
                              "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("SHOAL_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
IN_CI = os.environ.get("CI", "").lower() == "true"


def _reachable(url: str) -> bool:
    parsed = urlparse(url)
    try:
        with socket.create_connection((parsed.hostname or "127.0.0.1", parsed.port or 5432), 1):
            return True
    except OSError:
        return False


def require_service(url: str, name: str, env: str) -> None:
    """Skip (or, under CI, fail) when a service the test needs is not there."""
    if _reachable(url):
        return
    message = (f"{name} is not reachable at {url}. Start it, or point {env} at one, "
               "to run these tests.")
    if IN_CI:
        pytest.fail(message)
    pytest.skip(message)


def make_settings(tmp_path: Path, **overrides: object) -> Settings:
    """Development settings on a fresh data directory with fast timings."""
    values: dict[str, object] = {
        "mode": "dev", "data_dir": tmp_path / "data", "bcrypt_rounds": 4,
        "heartbeat_interval": 0.5, "lease_seconds": 3.0, "sweep_interval": 0.2,
        "retry_delays": [0.1, 0.2, 0.3], "secret_key": "test-secret-" + "x" * 32,
        # Tests on the shared Redis sign in as the same users from the same address within a
        # minute; the tests of the limits set their own.
        "login_rate_limit_per_minute": 1000, "login_account_rate_limit_per_minute": 1000,
        # Copies made for one test share a namespace on the shared Redis; other tests (and
        # other runs on this machine) do not hear them.
        "redis_namespace": "shoal-test-" + hashlib.sha256(str(tmp_path).encode()).hexdigest()[:12],
    }
    values.update(overrides)
    return Settings(**values)  # type: ignore[arg-type]


async def fresh_postgres(url: str) -> str:
    """A new empty database on the test server; returns its URL."""
    name = f"shoal_t_{uuid.uuid4().hex[:12]}"
    db = Database.connect(url)
    async with db.engine.connect() as conn:
        await conn.execution_options(isolation_level="AUTOCOMMIT")
        await conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    await db.dispose()
    return url.rsplit("/", 1)[0] + "/" + name


async def drop_postgres(url: str, admin_url: str) -> None:
    """Remove a database made by `fresh_postgres`."""
    name = url.rsplit("/", 1)[1]
    db = Database.connect(admin_url)
    async with db.engine.connect() as conn:
        await conn.execution_options(isolation_level="AUTOCOMMIT")
        await conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    await db.dispose()


CLI_DIR = Path(os.environ.get("SHOAL_TEST_CLI_DIR",
                              Path(__file__).resolve().parent.parent / ".tools/node_modules/.bin"))


def require_cli(name: str) -> str:
    """The path of an AI CLI installed by `make clis`; skip (or, under CI, fail) without it."""
    path = CLI_DIR / name
    if path.is_file() and os.access(path, os.X_OK):
        return str(path)
    message = (f"The {name!r} CLI is not installed in {CLI_DIR}. Run `make clis` (npm installs "
               "the pinned Claude Code, Gemini and Codex CLIs there) to run these tests.")
    if IN_CI:
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """A fresh, empty database of each kind."""
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'test.db'}"
        return
    require_service(POSTGRES_URL, "PostgreSQL", "SHOAL_TEST_POSTGRES_URL")
    url = await fresh_postgres(POSTGRES_URL)
    try:
        yield url
    finally:
        await drop_postgres(url, POSTGRES_URL)


@pytest.fixture
async def db(database_url: str) -> AsyncIterator[Database]:
    """A migrated database of each kind."""
    database = Database.connect(database_url)
    await database.migrate()
    try:
        yield database
    finally:
        await database.dispose()


@pytest.fixture
async def pg_db() -> AsyncIterator[Database]:
    """A migrated PostgreSQL database, for what only PostgreSQL has (row locks, SKIP LOCKED,
    the one-statement batch)."""
    require_service(POSTGRES_URL, "PostgreSQL", "SHOAL_TEST_POSTGRES_URL")
    url = await fresh_postgres(POSTGRES_URL)
    database = Database.connect(url)
    try:
        await database.migrate()
        yield database
    finally:
        await database.dispose()
        await drop_postgres(url, POSTGRES_URL)


@pytest.fixture
async def redis_url() -> str:
    """The test Redis URL; skips (or fails under CI=true) when Redis is not reachable."""
    require_service(REDIS_URL, "Redis", "SHOAL_TEST_REDIS_URL")
    client = aioredis.Redis.from_url(REDIS_URL, socket_connect_timeout=2)
    try:
        await client.ping()
    finally:
        await client.aclose()
    return REDIS_URL


@pytest.fixture(scope="session", autouse=True)
def _config_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The `shoal` commands the tests start keep their sessions in a folder of the test run's,
    never in the config directory of the person running the tests."""
    path = tmp_path_factory.mktemp("config")
    before = os.environ.get("XDG_CONFIG_HOME")
    os.environ["XDG_CONFIG_HOME"] = str(path)
    yield path
    if before is None:
        os.environ.pop("XDG_CONFIG_HOME", None)
    else:
        os.environ["XDG_CONFIG_HOME"] = before


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    """Development settings on a fresh data directory."""
    return make_settings(tmp_path)





def pytest_report_header() -> list[str]:
    """Say up front whether the PostgreSQL and Redis tests will run, and how to enable them."""
    lines = []
    for name, url, env in (("PostgreSQL", POSTGRES_URL, "SHOAL_TEST_POSTGRES_URL"),
                           ("Redis", REDIS_URL, "SHOAL_TEST_REDIS_URL")):
        if _reachable(url):
            lines.append(f"{name}: {url} (tests run)")
        else:
            lines.append(f"{name}: NOT reachable at {url}: its tests are skipped"
                         f"{' (and fail under CI=true)' if IN_CI else ''}; start it or set {env}")
    missing = [n for n in ("claude", "gemini", "codex") if not (CLI_DIR / n).is_file()]
    if missing:
        lines.append(f"AI CLIs: {', '.join(missing)} NOT in {CLI_DIR}: their tests are skipped"
                     f"{' (and fail under CI=true)' if IN_CI else ''}; run `make clis`")
    else:
        lines.append(f"AI CLIs: claude, gemini, codex in {CLI_DIR} (tests run)")
    return lines
