"""`create_app(settings)`: the control plane's ASGI app with its runtime, bus and store."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import structlog
from fastapi import Depends, FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import HTMLResponse, Response
from fastapi.staticfiles import StaticFiles
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from shoal import __version__, heap
from shoal.api import client_ws, fanout, health, worker_ws
from shoal.api.apidocs import add_api_docs
from shoal.api.body_limit import BodyLimit
from shoal.api.deps import Services, ServicesDep, checked_path
from shoal.api.errors import install_error_handlers
from shoal.api.headers import SecurityHeaders
from shoal.api.reporting import PdfRenderer
from shoal.api.request_times import RequestTimes
from shoal.api.routes import (
    account,
    auth,
    checkpoints,
    notifications,
    public,
    reports,
    subtasks,
    tasks,
    uploads,
    workers,
    workflows,
)
from shoal.api.traces import TaskTraces
from shoal.artifacts.store import ArtifactStore
from shoal.auth.ratelimit import MemoryRateLimiter, RateLimiter, RedisRateLimiter
from shoal.bus import keys
from shoal.bus.base import EventBus
from shoal.bus.memory import MemoryBus
from shoal.config import Settings
from shoal.notify import Notifier
from shoal.runtime.core import Runtime
from shoal.runtime.forwarding import RedisForwarder
from shoal.runtime.relay import RedisRelay
from shoal.stalls import LoopWatch
from shoal.store.db import Database
from shoal.tracing import Tracing
from shoal.web.pages import CSP, app_html, static_dir
from shoal.workflows import Catalog

log = structlog.get_logger(__name__)
UPLOAD_OVERHEAD = 64 * 1024  # bytes of multipart framing allowed beside an upload's files
# What a page of another origin listed in `cors_origins` may send (its preflight is answered).
CORS_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"]
CORS_HEADERS = ["Authorization", "Content-Type", "Last-Event-ID"]


async def build_services(settings: Settings) -> Services:
    """Connect the store, bus and limiter, and build the runtime (not yet running)."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    db = Database.connect(settings.resolved_database_url)
    await db.migrate()
    bus: EventBus
    limiter: RateLimiter
    if settings.redis_url:
        from shoal.bus.redis import RedisBus

        ns = settings.redis_namespace
        bus = RedisBus(settings.redis_url, channel=keys.events_channel(ns),
                       prev_ttl=settings.claim_ttl)
        limiter = RedisRateLimiter.from_url(settings.redis_url, namespace=ns)
        forwarder: RedisForwarder | None = RedisForwarder(settings.redis_url, namespace=ns)
        relay: RedisRelay | None = RedisRelay(settings.redis_url, namespace=ns)
    else:
        bus = MemoryBus()
        limiter = MemoryRateLimiter()
        forwarder = None  # one copy, or copies without Redis: commands are not forwarded
        relay = None  # … nor workers shared
    artifacts = ArtifactStore(settings.artifacts_dir)
    runtime = Runtime(settings, db, bus, artifacts, forwarder=forwarder, relay=relay)
    return Services(settings=settings, db=db, bus=bus, artifacts=artifacts, runtime=runtime,
                    limiter=limiter, workflows=load_workflows(settings.data_dir / "workflows"),
                    pdf=PdfRenderer())


def load_workflows(folder: Path) -> Catalog:
    """The built-in workflows (`shoal/workflows/builtin/`) and the documents in `folder`
    (`*.yaml`, `*.yml`); a document that cannot run is left out with a warning naming its
    file, line and field, and none takes a built-in's name."""
    texts = []
    for path in sorted([*folder.glob("*.yaml"), *folder.glob("*.yml")]):
        try:
            texts.append((str(path), path.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError) as exc:
            log.warning("workflows.unreadable", file=str(path), error=exc.__class__.__name__)
    catalog, problems = Catalog.from_texts(texts)
    for problem in problems:
        log.warning("workflows.skipped", problem=problem)
    return catalog


def create_app(settings: Settings, *, tracing: Tracing | None = None) -> FastAPI:
    """The control plane: REST under /api/v1, /ws for clients, /ws/worker for workers.

    Spans go to `tracing` when given (it stays open), else where the OTel variables say."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        services = await build_services(settings)
        app.state.services = services
        app.state.lanes = lanes = fanout.Lanes()  # the client WebSocket's shared writers
        traces = await TaskTraces.open(services, tracing)  # does nothing unless tracing
        runner = asyncio.create_task(services.runtime.run(), name="shoal-runtime")
        await _wait_ready(services.runtime, runner)
        runner.add_done_callback(_stop_process_if_failed)
        # Task ends and checkpoints, from the event log, to webhooks and email (notify/).
        notifier = asyncio.create_task(Notifier(settings, services.db).run(),
                                       name="shoal-notifier")
        heap.settle()
        watch = None
        if settings.loop_stall_seconds:  # a blocking call on the loop names its line
            watch = LoopWatch(threshold=settings.loop_stall_seconds)
            watch.start()
        log.info("control_plane.started", url=settings.base_url,
                 database=services.db.dialect, bus=type(services.bus).__name__)
        try:
            yield
        finally:
            if watch is not None:
                watch.stop()
            notifier.cancel()  # first: it hands half-done deliveries back to the store
            with contextlib.suppress(asyncio.CancelledError):
                await notifier
            services.runtime.stop()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(runner, timeout=30)
            await services.runtime.abandon()  # what a runtime cancelled mid-run left open
            await services.bus.close()
            await services.limiter.close()
            await lanes.close()
            services.pdf.close()
            await traces.close()
            await services.db.dispose()

    app = FastAPI(title="Shoal", version=__version__, lifespan=lifespan,
                  description="Multi-agent task orchestration across many machines.",
                  dependencies=[Depends(checked_path)], docs_url=None, redoc_url=None)
    install_error_handlers(app)
    app.add_middleware(BodyLimit, max_bytes=settings.max_request_bytes, larger={
        "/api/v1/uploads": settings.max_upload_bytes + UPLOAD_OVERHEAD})
    if settings.cors_origins:  # outside the body limit: its 413 carries CORS headers too
        app.add_middleware(CORSMiddleware, allow_origins=settings.cors_origins,
                           allow_credentials=True, allow_methods=CORS_METHODS,
                           allow_headers=CORS_HEADERS, expose_headers=["Retry-After"])
    app.add_middleware(SecurityHeaders, hsts_max_age=settings.hsts_max_age)
    app.add_middleware(RequestTimes)  # outermost: a refused body is timed too
    for router in (health.router, auth.router, tasks.router, reports.router, subtasks.router,
                   checkpoints.router, workers.router, workflows.router, uploads.router,
                   account.router, notifications.router, public.router,
                   client_ws.router, worker_ws.router):
        app.include_router(router)
    _add_plain_routes(app)
    add_api_docs(app)  # /docs, served offline under the dashboard's policy
    return app


def _stop_process_if_failed(runner: asyncio.Task[None]) -> None:
    """Without its runtime a control plane cannot make progress: stop it so the process
    manager restarts it, and start-up recovery picks up where it left off (crash-only)."""
    if runner.cancelled() or runner.exception() is None:
        return
    log.critical("control_plane.runtime_failed", error=str(runner.exception()))
    os.kill(os.getpid(), signal.SIGTERM)


async def _wait_ready(runtime: Runtime, runner: asyncio.Task[None]) -> None:
    ready = asyncio.create_task(runtime.ready.wait())
    done, _ = await asyncio.wait({ready, runner}, return_when=asyncio.FIRST_COMPLETED)
    if runner in done:
        ready.cancel()
        runner.result()  # raises the start-up error
        raise RuntimeError("The runtime stopped during start-up.")


async def metrics(services: ServicesDep) -> Response:
    """Prometheus metrics (every one: `docs/reference/metrics.md`)."""
    return Response(generate_latest(services.runtime.metrics.registry),
                    media_type=CONTENT_TYPE_LATEST)


async def dashboard(task_id: str | None = None) -> HTMLResponse:
    """The dashboard's shell (public: it holds no data; its script signs in); the other
    security headers come from `SecurityHeaders`."""
    return HTMLResponse(app_html(), headers={"Content-Security-Policy": CSP,
                                             "Cache-Control": "no-cache"})


def _add_plain_routes(app: FastAPI) -> None:
    """Metrics and the dashboard's pages. Their endpoints are module functions, not closures
    over `app`: FastAPI keeps every endpoint it has classified in a cache of its own, so an
    endpoint that held its app would keep a stopped app, and all its services, alive."""
    app.get("/metrics", tags=["health"])(metrics)
    for path in ("/", "/login", "/tasks/{task_id}", "/workers", "/new", "/settings",
                 "/workflows"):
        app.get(path, include_in_schema=False)(dashboard)
    app.mount("/static", StaticFiles(directory=static_dir()), name="static")
