"""`/metrics` as an operator's Prometheus reads it: parsed with prometheus_client's own parser,
with counters and histograms that move by exactly what a small plan did.

A worker that speaks the protocol itself decides every outcome: one result sent under a stale
fence (refused), one failure (retried), two successes with the tokens and model they report.
"""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families
from structlog.testing import capture_logs
from websockets.asyncio.client import ClientConnection, connect

from shoal import admin
from shoal.api.server import RunningServer, running_server
from shoal.config import Settings
from tests.conftest import make_settings
from tests.e2e.procs import receive_until
from tests.runtime.harness import echo_worker, login, task_detail, wait_until

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]




async def scrape(srv: RunningServer) -> Samples:
    """Every sample of `/metrics` (unauthenticated, as Prometheus scrapes it)."""
    async with httpx.AsyncClient(base_url=srv.url) as anon:
        resp = await anon.get("/metrics")
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/plain")
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(resp.text) for s in family.samples}


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def moved(before: Samples, after: Samples, name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


async def _register(srv: RunningServer) -> ClientConnection:
    token = await admin.create_worker_token(srv.services.db, name=f"raw-{uuid.uuid4().hex[:6]}")
    ws = await connect(srv.url.replace("http://", "ws://") + "/ws/worker",
                       additional_headers={"Authorization": f"Bearer {token}"})
    await ws.send(json.dumps({
        "v": 1, "type": "worker_register", "machine_id": f"raw-{uuid.uuid4()}",
        "machine_name": "raw", "slots": 4, "tools": [{"name": "echo", "local": True}]}))
    await receive_until(ws, lambda m: m["type"] == "registered")
    return ws


async def _result(ws: ClientConnection, run: dict[str, Any], *, fence: int | None = None,
                  **fields: Any) -> dict[str, Any]:
    await ws.send(json.dumps({"v": 1, "type": "task_result", "attempt_id": run["attempt_id"],
                              "fence": run["fence"] if fence is None else fence,
                              "status": "succeeded", "output": f"did {run['name']}", **fields}))
    return await receive_until(ws, lambda m: m["type"] == "ack"
                               and m["attempt_id"] == run["attempt_id"])


async def test_each_heartbeat_handled_is_timed(server: RunningServer) -> None:
    ws = await _register(server)
    async with ws:
        before = await scrape(server)
        for cpu in (5.0, 6.0):
            await ws.send(json.dumps({"v": 1, "type": "heartbeat", "cpu_percent": cpu,
                                      "memory_percent": 1.0, "disk_percent": 1.0,
                                      "running": []}))

        async def both() -> Samples | None:
            after = await scrape(server)
            return after if moved(before, after, "shoal_worker_heartbeat_seconds_count") >= 2 \
                else None

        after = await wait_until(both, what="two heartbeats to be timed")
    assert moved(before, after, "shoal_worker_heartbeat_seconds_count") == 2
    assert 0 < moved(before, after, "shoal_worker_heartbeat_seconds_sum") < 5


async def test_a_small_plan_moves_each_counter_by_what_happened(
    server: RunningServer, settings: Settings, client: httpx.AsyncClient
) -> None:
    ws = await _register(server)
    async with ws:
        await wait_until(lambda: len(server.services.runtime.fleet), what="the worker")
        before = await scrape(server)
        assert value(before, "shoal_workers", state="online") == 1
        resp = await client.post("/api/v1/tasks", json={
            "description": "Two steps", "quality": "off",
            "plan": [{"name": "good", "description": "works", "tool": "echo"},
                     {"name": "flaky", "description": "fails once", "tool": "echo"}]})
        assert resp.status_code == 201, resp.text
        task_id = resp.json()["task_id"]
        runs = {}
        for _ in range(2):
            run = await receive_until(ws, lambda m: m["type"] == "execute_task")
            runs[run["name"]] = run
        refused = await _result(ws, runs["good"], fence=runs["good"]["fence"] + 1)
        assert refused["accepted"] is False
        accepted = await _result(ws, runs["good"], usage={
            "input_tokens": 100, "output_tokens": 20, "cost_usd": 0.5, "model": "m-one"})
        assert accepted["accepted"] is True
        failed = await _result(ws, runs["flaky"], status="failed", error="not this time",
                               usage={"input_tokens": 7, "model": "m-two"})
        assert failed["accepted"] is True
        again = await receive_until(ws, lambda m: m["type"] == "execute_task")
        assert (again["name"], again["fence"]) == ("flaky", 2)
        assert (await _result(ws, again))["accepted"] is True
        detail = await wait_until(lambda: _finished(client, task_id), what="the task to end")
        assert detail["status"] == "completed"
        late = await _result(ws, runs["good"])  # its attempt has ended: refused, and counted
        assert (late["accepted"], late["reason"]) == (
            False, "This attempt has ended; its result is refused.")
        assert (await client.get(f"/api/v1/tasks/{task_id}")).status_code == 200
        after = await scrape(server)

    assert moved(before, after, "shoal_tasks_total", workflow="dag", status="completed") == 1
    for outcome, count in (("completed", 2), ("retried", 1), ("fenced", 1), ("failed", 0)):
        assert moved(before, after, "shoal_attempts_total", tool="echo",
                     outcome=outcome) == count, outcome
    assert moved(before, after, "shoal_attempts_total", tool="unknown", outcome="fenced") == 1
    assert moved(before, after, "shoal_attempt_duration_seconds_count", tool="echo") == 3
    assert moved(before, after, "shoal_dispatch_latency_seconds_count") == 3
    assert moved(before, after, "shoal_model_input_tokens_total", tool="echo",
                 model="m-one") == 100
    assert moved(before, after, "shoal_model_output_tokens_total", tool="echo",
                 model="m-one") == 20
    assert moved(before, after, "shoal_model_cost_usd_total", tool="echo",
                 model="m-one") == 0.5
    assert moved(before, after, "shoal_model_input_tokens_total", tool="echo",
                 model="m-two") == 7
    assert value(after, "shoal_queued") == 0
    assert value(after, "shoal_live_attempts") == 0
    # Requests are timed under their route's template, never the path with an id in it.
    assert value(after, "shoal_http_request_duration_seconds_count", method="POST",
                 route="/api/v1/tasks", status="2xx") >= 1
    assert value(after, "shoal_http_request_duration_seconds_count", method="GET",
                 route="/api/v1/tasks/{task_id}", status="2xx") >= 1
    assert not [key for key in after if any(task_id in v for _, v in key[1])]


async def test_a_task_that_fails_counts_its_failed_attempts(
    server: RunningServer, settings: Settings, client: httpx.AsyncClient
) -> None:
    async with echo_worker(server, settings):
        before = await scrape(server)
        resp = await client.post("/api/v1/tasks", json={
            "description": "Fails", "quality": "off",
            "plan": [{"name": "bad", "description": "fails", "tool": "echo",
                      "options": {"fail": True}}]})
        task_id = resp.json()["task_id"]
        detail = await wait_until(lambda: _finished(client, task_id), what="the task to end")
        after = await scrape(server)
    assert detail["status"] == "failed"
    tries = settings.max_attempts
    assert moved(before, after, "shoal_tasks_total", workflow="dag", status="failed") == 1
    assert moved(before, after, "shoal_attempts_total", tool="echo", outcome="retried") == \
        tries - 1
    assert moved(before, after, "shoal_attempts_total", tool="echo", outcome="failed") == 1
    assert moved(before, after, "shoal_attempt_duration_seconds_count", tool="echo") == tries


async def test_live_streams_are_counted_and_their_events_timed(
    server: RunningServer, settings: Settings, client: httpx.AsyncClient
) -> None:
    """An open client socket and SSE stream show in the gauge while open; the events they
    deliver live are observed in the fan-out lag; both gauges return to 0 once closed."""
    token = client.headers["Authorization"].removeprefix("Bearer ")
    plan = {"description": "One step", "quality": "off",
            "plan": [{"name": "one", "description": "works", "tool": "echo"}]}
    async with echo_worker(server, settings):
        url = server.url.replace("http://", "ws://") + "/ws"
        async with connect(url, additional_headers={"Authorization": f"Bearer {token}"}) as ws:
            await ws.send(json.dumps({"type": "subscribe"}))
            await receive_until(ws, lambda m: m["type"] == "subscribed")
            opened = await scrape(server)
            assert value(opened, "shoal_client_streams", stream="websocket") == 1
            # An event received proves the socket follows the bus: every later one is live.
            assert (await client.post("/api/v1/tasks", json=plan)).status_code == 201
            await receive_until(ws, lambda m: m["type"] == "task_complete")
            before = await scrape(server)
            resp = await client.post("/api/v1/tasks", json=plan)
            assert resp.status_code == 201
            live = 1
            while (await receive_until(ws, lambda m: "seq" in m))["type"] != "task_complete":
                live += 1
        after = await scrape(server)
        assert moved(before, after, "shoal_event_fanout_lag_seconds_count",
                     stream="websocket") == live
        task_id = resp.json()["task_id"]
        async with client.stream("GET", f"/api/v1/tasks/{task_id}/events") as stream:
            assert stream.status_code == 200
            lines = stream.aiter_lines()  # held: an iterator dropped is closed, and the stream
            await lines.__anext__()  # with it, maybe before the scrape below
            during = await scrape(server)
            assert value(during, "shoal_client_streams", stream="sse") == 1

    async def closed() -> bool:
        now = await scrape(server)
        return (value(now, "shoal_client_streams", stream="sse") == 0
                and value(now, "shoal_client_streams", stream="websocket") == 0)

    await wait_until(closed, what="both streams to be counted as closed")


async def test_every_series_the_grafana_dashboard_graphs_is_served(
    server: RunningServer,
) -> None:
    """docs/grafana/shoal.json queries only names `/metrics` serves, with their suffixes."""
    async with httpx.AsyncClient(base_url=server.url) as anon:
        text = (await anon.get("/metrics")).text
    served: set[str] = set()
    for family in text_string_to_metric_families(text):
        suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"),
                    "gauge": ("",)}[family.type]
        served.update(family.name + suffix for suffix in suffixes)
    dashboard = json.loads((Path(__file__).parents[2] / "docs/grafana/shoal.json").read_text())
    queried = {name for panel in dashboard["panels"] for target in panel["targets"]
               for name in re.findall(r"\bshoal_[a-z_]+", target["expr"])}
    assert len(queried) >= 10
    assert queried <= served, queried - served


async def test_the_sqlite_wal_and_its_checkpoints_are_served(
    server: RunningServer, client: httpx.AsyncClient, settings: Settings
) -> None:
    """A control plane on SQLite serves its WAL's size and its checkpoints; writes go on, a
    checkpoint follows within CHECKPOINT_SECONDS (ADR 0050), and the count moves."""
    wal = Path(settings.resolved_database_url.split(":///", 1)[1] + "-wal")
    before = await scrape(server)
    size = (await asyncio.to_thread(wal.stat)).st_size
    assert 0 <= value(before, "shoal_sqlite_wal_bytes") <= size * 2
    for kind in ("passive", "restarted", "deferred", "failed"):
        assert ("shoal_sqlite_checkpoints_total", frozenset({("kind", kind)})) in before

    async def checkpointed() -> Samples | None:
        await client.post("/api/v1/tasks", json={"description": "A write", "quality": "off"})
        now = await scrape(server)
        return now if moved(before, now, "shoal_sqlite_checkpoints_total",
                            kind="passive") >= 1 else None

    after = await wait_until(checkpointed, what="a checkpoint to be counted")
    assert value(after, "shoal_sqlite_checkpoints_total", kind="failed") == 0
    assert value(after, "shoal_sqlite_wal_bytes") > 0


async def _finished(client: httpx.AsyncClient, task_id: str) -> dict[str, Any] | None:
    detail = await task_detail(client, task_id)
    return detail if detail["status"] in ("completed", "failed") else None


async def test_a_slow_request_is_logged_under_its_route(tmp_path: Path) -> None:
    """Over `slow_request_seconds` (here every request: a nanosecond), a request is logged by
    its route's template; with 0, none is."""
    for limit, expected in ((1e-9, [("GET", "/api/v1/tasks/{task_id}", 404)]), (0.0, [])):
        settings = make_settings(tmp_path / str(limit), slow_request_seconds=limit)
        async with running_server(settings) as srv:
            client = await login(srv, settings)
            try:
                with capture_logs() as logs:
                    resp = await client.get(f"/api/v1/tasks/{uuid.uuid4()}")
            finally:
                await client.aclose()
        assert resp.status_code == 404
        slow = [(e["method"], e["route"], e["status"]) for e in logs
                if e["event"] == "http.slow_request"]
        assert slow == expected, limit
        assert all(e["log_level"] == "warning" and e["seconds"] >= 0 for e in logs
                   if e["event"] == "http.slow_request")
