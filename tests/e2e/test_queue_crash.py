"""Kill -9 the control plane while a user's tasks wait in their queue: after the restart they
start in the order they were submitted, and never more than the user's limit run at once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.e2e.procs import (
    cluster,
    free_port,
    signed_in,
    submit,
    wait_healthy,
    wait_task,
    wait_workers_online,
)
from tests.runtime.harness import max_running

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def _task(name: str, delay: float) -> dict[str, Any]:
    return {"description": f"Task {name}", "plan": [
        {"name": name, "description": "wait", "tool": "echo", "options": {"delay": delay}}]}


async def test_the_queue_keeps_its_order_across_a_crash(database_url: str,
                                                        tmp_path: Path) -> None:
    """Three slow tasks run, three more wait at 1, 2 and 3; kill -9 and a restart later they
    run in that order, at most three at a time."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    async with cluster(tmp_path, database_url) as stack:
        await stack.create_user("alice")
        server = stack.start_server(port)
        token = await stack.create_worker_token("w1")
        await wait_healthy(url, server)
        worker = stack.start_worker("w1", token, url, slots=6)
        async with signed_in(url, "alice") as client:
            await wait_workers_online(client, {"w1"}, [server, worker])
            ids = [await submit(client, _task(f"slow{i}", 2.0)) for i in range(3)]
            waiting = [await submit(client, _task(f"next{i}", 0.2)) for i in range(3)]
            positions = [(await client.get(f"/api/v1/tasks/{t}")).json()["queue_position"]
                         for t in waiting]
            assert positions == [1, 2, 3]
            await server.kill()
            restarted = stack.start_server(port, name="server-restarted")
            await wait_healthy(url, restarted)
            details = [await wait_task(client, t, within=60, what=f"task {t} to finish",
                                       procs=[restarted, worker],
                                       until=lambda d: d["status"] in ("completed", "failed"))
                       for t in [*ids, *waiting]]
    assert [d["status"] for d in details] == ["completed"] * 6
    starts = [d["started_at"] for d in details[3:]]
    assert starts == sorted(starts), "the queued tasks started out of order"
    assert max_running(details) <= 3
