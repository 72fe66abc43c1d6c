"""Between copies sharing PostgreSQL and Redis, a copy listens only to the tasks its watchers
follow (ADR 0043), and a watcher on one copy of a task driven by the other sees every event of
it once, in order, as the store has them."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from shoal.bus.redis import RedisBus
from tests.runtime.harness import GatedEcho, sse_events, submit, wait_for_status
from tests.runtime.test_claims import two_copies

GATED = [{"name": "held", "description": "echo", "tool": "echo", "options": {"gated": True}}]
CHAIN = [{"name": f"s{i}", "description": "echo", "tool": "echo",
          "dependencies": [f"s{i - 1}"] if i else []} for i in range(4)]


async def test_a_copy_listens_only_to_the_tasks_its_watchers_follow(
    database_url: str, redis_url: str, tmp_path: Path,
) -> None:
    tool = GatedEcho()
    admin = aioredis.Redis.from_url(redis_url)
    try:
        async with two_copies(database_url, tmp_path, claim_ttl=3.0, redis_url=redis_url,
                              worker_tools={"echo": tool}) as pair:
            bus = pair.b.services.bus
            assert isinstance(bus, RedisBus)
            watched = await submit(pair.client_a, GATED)  # both driven by copy "a"
            other = await submit(pair.client_a, CHAIN)
            seen: list[dict[str, Any]] = []
            async with pair.client_b.stream("GET", f"/api/v1/tasks/{watched}/events") as resp:
                assert resp.status_code == 200
                lines = resp.aiter_lines()
                async for line in lines:  # the first event: "b" subscribed before its replay
                    if line.startswith("data: "):
                        seen.append(json.loads(line[6:]))
                        break
                channels = [bus.task_channel(uuid.UUID(t)) for t in (watched, other)]
                assert await admin.pubsub_numsub(*channels) == [
                    (channels[0].encode(), 1), (channels[1].encode(), 0)]
                await wait_for_status(pair.client_a, other, "completed")
                tool.gate.set()
                async for line in lines:
                    if line.startswith("data: "):
                        seen.append(json.loads(line[6:]))
                        if seen[-1]["type"] == "task_complete":
                            break
            # The whole log of the task, read back from the store once it ended.
            stored = await sse_events(pair.client_a, watched, until={"task_complete"})
            assert [e["seq"] for e in seen if e.get("seq")] == [
                e["seq"] for e in stored if e.get("seq")]
    finally:
        await admin.aclose()
