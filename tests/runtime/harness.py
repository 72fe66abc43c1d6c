"""Helpers for tests that drive a real in-process control plane with real workers."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from datetime import datetime
from typing import Any, TypeVar

import httpx

from shoal import admin
from shoal.api.server import RunningServer, running_server
from shoal.config import Settings
from shoal.tools.base import Tool, ToolOutcome, ToolRun
from shoal.tools.echo import EchoTool
from shoal.tracing import Tracing
from shoal.worker.agent import Worker
from shoal.worker.connection import Backoff

DEADLINE = 20.0
T = TypeVar("T")


class GatedEcho(EchoTool):
    """The echo tool, except that runs with option `gated` wait until the test opens the gate."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.started = asyncio.Event()
        self.runs = 0

    async def run(self, run: ToolRun) -> ToolOutcome:
        """Count the run, wait at the gate if asked to, then echo."""
        self.runs += 1
        if run.options.get("gated"):
            self.started.set()
            await self.gate.wait()
        return await super().run(run)


class KeyedGates(EchoTool):
    """The echo tool, except that a run with option `gate: NAME` waits until the test opens
    the gate of that name (`open(NAME)`), so tasks can be let finish one at a time."""

    def __init__(self) -> None:
        self.gates: dict[str, asyncio.Event] = {}
        self.waiting: dict[str, int] = {}

    def gate(self, name: str) -> asyncio.Event:
        """The gate `name` (made closed on first use)."""
        return self.gates.setdefault(name, asyncio.Event())

    def open(self, name: str) -> None:
        """Let the runs waiting at gate `name` (and every later one) through."""
        self.gate(name).set()

    async def run(self, run: ToolRun) -> ToolOutcome:
        """Wait at the run's gate, if it names one, then echo."""
        name = run.options.get("gate")
        if name:
            self.waiting[name] = self.waiting.get(name, 0) + 1
            await self.gate(str(name)).wait()
        return await super().run(run)


async def wait_until(
    check: Callable[[], Awaitable[T | None]] | Callable[[], T | None],
    *,
    what: str,
    within: float = DEADLINE,
) -> T:
    """Poll `check` until it returns something truthy; fail naming `what` at the deadline."""
    deadline = time.monotonic() + within
    pause = 0.02  # grows to 0.25 s, so a long wait stays far below the API's rate limit
    while True:
        value = check()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value  # type: ignore[return-value]
        if time.monotonic() > deadline:
            raise AssertionError(f"Timed out after {within:g} s waiting for {what}.")
        await asyncio.sleep(pause)
        pause = min(0.25, pause * 1.5)


async def login(srv: RunningServer, settings: Settings, name: str = "alice") -> httpx.AsyncClient:
    """A new user and an HTTP client signed in as them."""
    await admin.create_user(srv.services.db, settings, username=name, password="password123")
    client = httpx.AsyncClient(base_url=srv.url, timeout=30)
    resp = await client.post(
        "/api/v1/auth/login", json={"username": name, "password": "password123"}
    )
    resp.raise_for_status()
    client.headers["Authorization"] = f"Bearer {resp.json()['access_token']}"
    return client


@contextlib.asynccontextmanager
async def echo_worker(
    srv: RunningServer,
    settings: Settings,
    *,
    name: str = "w1",
    slots: int = 2,
    backoff: Backoff | None = None,
    tools: Mapping[str, Tool] | None = None,
    tracing: Tracing | None = None,
) -> AsyncIterator[Worker]:
    """A worker (echo tool unless `tools` is given) connected to `srv`; stopped on exit."""
    token = await admin.create_worker_token(srv.services.db, name=name)
    worker = Worker(
        srv.url,
        token,
        settings,
        tools=tools or {"echo": EchoTool()},
        name=name,
        slots=slots,
        backoff=backoff,
        shutdown_grace=0,
        tracing=tracing,
    )
    runner = asyncio.create_task(worker.run(), name=f"worker-{name}")
    try:
        await wait_until(
            lambda: runner.done() or len(srv.services.runtime.fleet),
            what=f"worker {name} to connect",
        )
        if runner.done():
            runner.result()
        yield worker
    finally:
        worker.stop(grace=0)
        await runner


@contextlib.asynccontextmanager
async def demo_plane(
    settings: Settings, *, workers: tuple[str, ...] = ("w1",), slots: int = 2,
) -> AsyncIterator[tuple[RunningServer, httpx.AsyncClient]]:
    """A control plane, the demo model, and workers whose AI tool (`openai_compat`) talks to
    it (beside Shoal's own `citations`); yields the server and a signed-in client (closed at
    the end)."""
    from shoal.demo.model import running_demo_model
    from shoal.tools.agent_loop import OpenAICompatTool
    from shoal.tools.citations import CitationsTool

    async with running_demo_model() as model_url, running_server(settings) as srv:
        tool = OpenAICompatTool(base_url=model_url, api_key="sk-test", model="shoal-demo")
        async with contextlib.AsyncExitStack() as stack:
            for name in workers:
                await stack.enter_async_context(echo_worker(
                    srv, settings, name=name, slots=slots,
                    tools={"openai_compat": tool, "citations": CitationsTool(settings)}))
            await wait_until(lambda: len(srv.services.runtime.fleet) == len(workers),
                             what="the workers to connect")
            client = await login(srv, settings)
            try:
                yield srv, client
            finally:
                await client.aclose()


async def submit(
    client: httpx.AsyncClient,
    plan: list[dict[str, Any]] | None = None,
    description: str = "Echo things",
) -> str:
    """Submit a task; returns its id."""
    body: dict[str, Any] = {"description": description}
    if plan is not None:
        body["plan"] = plan
    resp = await client.post("/api/v1/tasks", json=body)
    assert resp.status_code == 201, resp.text
    return str(resp.json()["task_id"])


async def task_detail(client: httpx.AsyncClient, task_id: str) -> dict[str, Any]:
    """GET a task."""
    resp = await client.get(f"/api/v1/tasks/{task_id}")
    assert resp.status_code == 200, resp.text
    return dict(resp.json())


async def subtask_detail(client: httpx.AsyncClient, subtask_id: str) -> dict[str, Any]:
    """GET a subtask with its attempts."""
    resp = await client.get(f"/api/v1/subtasks/{subtask_id}")
    assert resp.status_code == 200, resp.text
    return dict(resp.json())


async def wait_for_status(
    client: httpx.AsyncClient, task_id: str, *statuses: str, within: float = DEADLINE
) -> dict[str, Any]:
    """Poll a task until its status is one of `statuses`; returns its detail."""

    async def reached() -> dict[str, Any] | None:
        detail = await task_detail(client, task_id)
        return detail if detail["status"] in statuses else None

    return await wait_until(
        reached, what=f"task {task_id} to be {'/'.join(statuses)}", within=within
    )


async def sse_events(
    client: httpx.AsyncClient, task_id: str, *, until: set[str], within: float = DEADLINE
) -> list[dict[str, Any]]:
    """Read a task's SSE stream (from the start) until an event of a type in `until` arrives."""
    seen: list[dict[str, Any]] = []
    async with asyncio.timeout(within):
        async with client.stream("GET", f"/api/v1/tasks/{task_id}/events") as resp:
            assert resp.status_code == 200
            async for line in resp.aiter_lines():
                if line.startswith("data: "):
                    seen.append(json.loads(line[6:]))
                    if seen[-1]["type"] in until:
                        return seen
    return seen


async def attempt_statuses(client: httpx.AsyncClient, detail: dict[str, Any]) -> list[list[str]]:
    """The status of every attempt of every subtask of a task detail, in order."""
    return [[a["status"] for a in (await subtask_detail(client, s["subtask_id"]))
             ["attempt_history"]] for s in detail["subtasks"]]


def by_name(detail: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A task detail's subtasks by name."""
    return {s["name"]: s for s in detail["subtasks"]}


async def max_running_by_commits(client: httpx.AsyncClient, task_ids: list[str]) -> int:
    """The most tasks that ran at once, in the order their changes were committed (the event
    log's sequence), not by their timestamps: a copy stamps a change with its batch's start,
    so two copies' stamps may overlap where their commits did not. A task runs from its first
    `in_progress` to its end."""
    edges: list[tuple[int, int]] = []
    for task_id in task_ids:
        events = await sse_events(client, task_id,
                                  until={"task_complete", "task_failed", "task_cancelled"})
        start = next(e["seq"] for e in events if e["type"] == "task_update"
                     and e["data"].get("status") == "in_progress")
        edges += [(start, 1), (events[-1]["seq"], -1)]
    most = now = 0
    for _, step in sorted(edges):
        now += step
        most = max(most, now)
    return most


def max_running(details: list[dict[str, Any]]) -> int:
    """The most tasks that ran at one moment, from their start and end times."""
    edges: list[tuple[datetime, int]] = []
    for d in details:
        if d["started_at"]:
            edges.append((datetime.fromisoformat(d["started_at"]), 1))
            if d["completed_at"]:
                edges.append((datetime.fromisoformat(d["completed_at"]), -1))
    most = now = 0
    for _, step in sorted(edges, key=lambda e: (e[0], e[1])):
        now += step
        most = max(most, now)
    return most
