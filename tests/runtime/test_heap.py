"""A control plane that runs for weeks keeps nothing per finished task: after a warm-up that
fills its bounded caches, running hundreds more tasks leaves its heap where it was, within what
those caches and the tasks in flight hold at any moment."""

from __future__ import annotations

import asyncio
import gc

import pytest

from shoal import workflows
from shoal.api.server import running_server
from shoal.config import Settings
from shoal.events import EventType
from tests.runtime.harness import echo_worker, login, submit

AT_ONCE = 10  # tasks in flight together
WARM = 150  # tasks that fill the bounded caches (sqlite3's cursor lists prune at 200, say)
MEASURED = 400
PER_TASK = 3  # objects a task may seem to leave: a leak of one record per task is more


def tracked() -> int:
    """The objects the collector tracks after a full collection, less those `heap.settle`
    froze at start-up (`gc.get_objects` leaves them out)."""
    gc.collect()
    gc.collect()
    return len(gc.get_objects())


@pytest.mark.e2e
@pytest.mark.timeout(240)
async def test_finished_tasks_leave_nothing_on_the_heap(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = settings.model_copy(update={"rate_limit_per_minute": 10_000})
    # The run documents of the last 1,024 tasks that pinned one are kept by design (a task's
    # decisions read its document there); at 10 they cannot hide a leak here.
    monkeypatch.setattr(workflows, "_PINNED_MAX", 10)
    plan = [{"name": "a", "description": "echo", "tool": "echo", "dependencies": []}]
    async with running_server(settings) as srv, echo_worker(srv, settings, slots=AT_ONCE):
        client = await login(srv, settings)

        async def run(count: int) -> None:
            async with srv.services.bus.subscribe() as events:
                waiting: set[str] = set()
                for _ in range(count // AT_ONCE):
                    waiting |= {await submit(client, plan) for _ in range(AT_ONCE)}
                    async with asyncio.timeout(60):
                        async for event in events:
                            if event.type is EventType.TASK_COMPLETE:
                                waiting.discard(str(event.task_id))
                            assert event.type is not EventType.TASK_FAILED, event.data
                            if not waiting:
                                break

        try:
            await run(WARM)
            before = tracked()
            await run(MEASURED)
            after = tracked()
        finally:
            await client.aclose()
    assert after - before < PER_TASK * MEASURED, (before, after)
