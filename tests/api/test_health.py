"""`/healthz` (liveness) and `/readyz` (readiness), unauthenticated, over real HTTP."""

from __future__ import annotations

import gc
import weakref

import httpx

from shoal.api.server import running_server
from shoal.config import Settings
from tests.runtime.harness import echo_worker, login


async def test_readyz_waits_for_the_required_workers(settings: Settings) -> None:
    """With one worker required, `/readyz` is 503 naming the workers until one connects, then
    200; `/healthz` is 200 throughout; a submission right after readiness succeeds."""
    async with running_server(settings.model_copy(update={"ready_workers": 1})) as srv, \
            httpx.AsyncClient(base_url=srv.url, timeout=10) as anon:
        assert (await anon.get("/healthz")).status_code == 200
        waiting = await anon.get("/readyz")
        assert waiting.status_code == 503
        assert int(waiting.headers["retry-after"]) >= 1
        body = waiting.json()
        assert body["status"] == "not_ready"
        assert {k for k, c in body["checks"].items() if not c["ok"]} == {"workers"}
        assert body["checks"]["workers"]["detail"] == "0 connected to this copy, 1 required"
        async with echo_worker(srv, settings):
            ready = await anon.get("/readyz")
            assert ready.status_code == 200, ready.text
            assert ready.json()["status"] == "ready"
            client = await login(srv, settings)
            try:
                resp = await client.post("/api/v1/tasks", json={"description": "Right away"})
                assert resp.status_code == 201, resp.text
            finally:
                await client.aclose()


async def test_readyz_is_not_ready_once_the_runtime_stops(settings: Settings) -> None:
    """A copy that is shutting down stops answering ready, so a balancer sends no new work."""
    async with running_server(settings) as srv, \
            httpx.AsyncClient(base_url=srv.url, timeout=10) as anon:
        assert (await anon.get("/readyz")).status_code == 200
        srv.services.runtime.stop()
        stopping = await anon.get("/readyz")
        assert stopping.status_code == 503
        assert stopping.json()["checks"]["runtime"]["ok"] is False


async def test_a_stopped_control_plane_leaves_nothing_alive(settings: Settings) -> None:
    """Once a control plane has stopped, nothing keeps its app or its services: a process
    that runs many in turn (this test suite) does not pile them up for the garbage collector
    to walk. FastAPI caches every endpoint it has classified, so an endpoint that closed over
    its app kept every stopped app alive."""
    async with running_server(settings) as srv, \
            httpx.AsyncClient(base_url=srv.url, timeout=10) as anon:
        assert (await anon.get("/metrics")).status_code == 200
        assert (await anon.get("/")).status_code == 200
        app, runtime = weakref.ref(srv.app), weakref.ref(srv.services.runtime)
    del srv
    gc.collect()
    assert app() is None, "the stopped app is still referenced"
    assert runtime() is None, "the stopped runtime is still referenced"
