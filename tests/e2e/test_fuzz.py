"""Schemathesis against a real `shoal serve` with a worker and a signed-in user: every operation
in the published OpenAPI document, fuzzed and chained through its links, for a bounded time, on
SQLite and on PostgreSQL (whose types, limits and errors differ)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.e2e.procs import (
    access_token,
    cluster,
    free_port,
    wait_healthy,
    wait_workers_online,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]
ST = str(Path(sys.executable).with_name("st"))
CHECKS = "not_a_server_error,response_schema_conformance,ignored_auth,use_after_free"
FUZZ_SECONDS = os.environ.get("SHOAL_FUZZ_SECONDS", "45")
FUZZ_SEED = os.environ.get("SHOAL_FUZZ_SEED", "20261124")  # set another to explore further
# The fuzzer sends thousands of requests a minute from one user and one address: the test
# raises the limits for itself (the limits themselves are tested in tests/auth).
UNLIMITED = {"SHOAL_RATE_LIMIT_PER_MINUTE": "1000000",
             "SHOAL_LOGIN_RATE_LIMIT_PER_MINUTE": "1000000",
             "SHOAL_LOGIN_ACCOUNT_RATE_LIMIT_PER_MINUTE": "1000000"}


async def test_schemathesis_finds_nothing(database_url: str, tmp_path: Path) -> None:
    """No 5xx, every response matches its documented schema, authentication is never ignored,
    and a deleted resource stays gone."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    async with cluster(tmp_path, database_url) as stack:
        await stack.create_user("alice", admin=True)
        server = stack.start("server", ["serve", "--port", str(port)],
                             {**stack.server_env(), **UNLIMITED}, tmp_path / "server")
        worker_token = await stack.create_worker_token("w1")
        await wait_healthy(url, server)
        worker = stack.start_worker("w1", worker_token, url)
        async with httpx.AsyncClient(base_url=url, timeout=15) as client:
            token = await access_token(client, "alice")
            client.headers["Authorization"] = f"Bearer {token}"
            await wait_workers_online(client, {"w1"}, [server, worker])
        done = await asyncio.to_thread(subprocess.run, [
            ST, "run", f"{url}/openapi.json", "--checks", CHECKS,
            "--header", f"Authorization: Bearer {token}", "--max-time", FUZZ_SECONDS,
            # One worker thread: Hypothesis parses lambdas with `ast` while it generates, and
            # CPython 3.11's AST recursion counter is not thread-safe (python/cpython#106905:
            # "AST constructor recursion depth mismatch" from two threads, now and then).
            "--max-examples", "25", "--seed", FUZZ_SEED, "--workers", "1",
            "--request-timeout", "10", "--output-sanitize", "true",
        ], cwd=tmp_path, capture_output=True, text=True, timeout=200, check=False)
        # What the server warned of (a slow request, a stalled loop with its line) says why
        # a request timed out.
        warned = [line for line in server.output().splitlines()
                  if "[warning" in line or "[error" in line]
        report = (done.stdout[-12_000:] + done.stderr[-3_000:]
                  + "\nserver warnings:\n" + "\n".join(warned[-40:])[-6_000:])
        assert done.returncode == 0, report
        assert "passed" in done.stdout, report
        print(done.stdout[-1_500:])  # the summary: operations, test cases, checks (with -s)
        assert server.alive(), server.output()[-3000:]
        log = server.output()
        assert "Traceback" not in log, log[-5000:]
        assert '" 500' not in log, log[-5000:]
