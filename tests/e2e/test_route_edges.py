"""Rules that hold on every route, walked from the published OpenAPI document against a real
`shoal serve` on SQLite and on PostgreSQL, so that a route added later is covered without anyone
listing it: hostile path parameters get a 4xx in the error shape, never a 5xx or a traceback."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import hypothesis
import pytest
import schemathesis
from schemathesis.core import NotSet

from tests.e2e.procs import access_token, cluster, free_port, wait_healthy

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

# What a client or an attacker may put in a path segment, as it travels (percent-encoded).
HOSTILE = {
    "a NUL": "a%00b",
    "a lone surrogate": "%ED%A0%80",  # U+D800 as WTF-8: not UTF-8
    "10 kB of text": "x" * 10_240,
    "a way out": "..%2F..%2F..%2Fetc%2Fpasswd",
    "not a UUID": "not-a-uuid",
    "2^63": str(2**63),
}
# Routes that answer without a token: health, metrics, signing in and shared reports.
PUBLIC = re.compile(r"^/(healthz|readyz|metrics)$|^/api/v1/auth/|^/s/")
ONE_EXAMPLE = hypothesis.settings(database=None, derandomize=True, max_examples=10,
                                  phases=[hypothesis.Phase.generate])


@dataclass(frozen=True, slots=True)
class Operation:
    """One route of the document, with a request that is valid but for what a test changes."""

    method: str
    path: str
    path_parameters: dict[str, str]
    query: dict[str, Any]
    body: Any

    def url(self, **replace: str) -> str:
        """The path with its parameters filled in (`replace`: raw, already encoded)."""
        values = {**self.path_parameters, **replace}
        return re.sub(r"\{(\w+)\}", lambda m: values[m.group(1)], self.path)


def operations(spec: dict[str, Any]) -> Iterator[Operation]:
    """Every operation of `spec`, each with a valid request (the first of Schemathesis'
    strategy), ids filled with a random UUID."""
    for result in schemathesis.openapi.from_dict(spec).get_all_operations():
        op = result.ok()
        case = hypothesis.find(op.as_strategy(), lambda _: True, settings=ONE_EXAMPLE)
        params = {name: str(uuid.uuid4()) if name.endswith("_id") else "x"
                  for name in case.path_parameters or {}}
        body = None if isinstance(case.body, NotSet) else case.body
        yield Operation(op.method.upper(), op.path, params, dict(case.query or {}), body)


def _assert_error_shape(resp: httpx.Response, where: str) -> None:
    assert 400 <= resp.status_code < 500, f"{where}: {resp.status_code} {resp.text[:300]}"
    assert resp.headers["content-type"].startswith("application/json"), where
    assert set(resp.json()) == {"error", "message", "details"}, f"{where}: {resp.text[:300]}"


async def test_hostile_path_parameters_get_a_4xx_on_every_route(
    database_url: str, tmp_path: Path,
) -> None:
    """Every path parameter of every route, given a NUL, a lone surrogate, 10 kB, a way out
    of its folder, a non-UUID or 2^63, answers a 4xx in the error shape; the log has no
    traceback and no 500; and without a token every route but the public ones answers 401."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    async with cluster(tmp_path, database_url) as stack:
        await stack.create_user("alice", admin=True)
        server = stack.start_server(port)
        await wait_healthy(url, server)
        async with httpx.AsyncClient(base_url=url, timeout=15) as client:
            spec = (await client.get("/openapi.json")).json()
            token = await access_token(client, "alice")
            checked = 0
            for op in operations(spec):
                anon = await client.request(op.method, op.url(), params=op.query, json=op.body)
                if not PUBLIC.match(op.path):
                    assert anon.status_code == 401, f"{op.method} {op.path}: {anon.status_code}"
                for name in op.path_parameters:
                    for what, raw in HOSTILE.items():
                        resp = await client.request(
                            op.method, op.url(**{name: raw}), params=op.query, json=op.body,
                            headers={"Authorization": f"Bearer {token}"})
                        _assert_error_shape(resp, f"{op.method} {op.path} with {what} as {name}")
                        checked += 1
        assert checked > 100, "the document has fewer path parameters than expected"
        log = server.output()
        assert server.alive(), log[-3000:]
        assert "Traceback" not in log, log[-5000:]
        assert '" 500' not in log, log[-5000:]
