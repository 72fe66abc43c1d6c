"""Kill -9 of the control plane between two waves of the `research` workflow: after a restart on
the same port the next wave starts, no planned step succeeds twice, and what completed before
the crash keeps its completion time.

Real processes as `test_research.py` has them (the sample corpus uploaded, the demo model, two
workers with two slots each); every answer of the demo model takes a second (`[demo:slow=1]`)
so that the moments below last long enough to be seen by polling and acted on.

"Between two waves" has no width of its own: the batch that decides the last gate of wave N
also queues wave N+1, and the scheduler dispatches it in that same commit. So the control plane
is killed at the two moments on either side of that commit (waves numbered from 1, as the
notices say them; `wave` 0, 1, 2 in the subtasks):

- **gate**: every task of wave 1 has answered and the last of their gates is still deciding
  (a judge running), wave 2 not started: the barrier is decided by the restarted control plane,
  which must then start wave 2;
- **running**: wave 1 completed and wave 2's tasks running on workers, wave 3 not started: the
  restarted control plane takes over the running attempts and must start wave 3.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from shoal.demo.corpus import SAMPLE_QUESTION, corpus_files
from tests.e2e.procs import (
    Cluster,
    Proc,
    free_port,
    signed_in,
    sse_events,
    submit,
    wait_healthy,
    wait_port,
    wait_task,
    wait_workers_online,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

SLOW = "[demo:slow=1]"  # seconds before each answer of the demo model: the windows below
Detail = dict[str, Any]


def _planned(detail: Detail) -> dict[str, Detail]:
    """The planned tasks (`plan#1.N`) by key: not their gates' judges or retries."""
    return {s["key"]: s for s in detail["subtasks"]
            if s["kind"] == "agent" and s["wave"] is not None}


def _wave(detail: Detail, n: int) -> list[Detail]:
    return [s for s in _planned(detail).values() if s["wave"] == n]


def _at_the_last_gate_of_wave_0(detail: Detail) -> bool:
    """Every task of wave 0 answered, one still waiting for its gate, wave 1 not started."""
    first, second = _wave(detail, 0), _wave(detail, 1)
    statuses = {s["status"] for s in first}
    return (bool(first) and statuses <= {"completed", "verifying"} and "verifying" in statuses
            and bool(second) and all(s["started_at"] is None for s in second))


def _while_wave_1_runs(detail: Detail) -> bool:
    """Wave 0 completed, a task of wave 1 started and not completed, wave 2 not started."""
    first, second, third = _wave(detail, 0), _wave(detail, 1), _wave(detail, 2)
    return (bool(first) and all(s["status"] == "completed" for s in first)
            and any(s["started_at"] and s["status"] != "completed" for s in second)
            and bool(third) and all(s["started_at"] is None for s in third))


MOMENTS: dict[str, tuple[Callable[[Detail], bool], int]] = {
    "gate": (_at_the_last_gate_of_wave_0, 1),  # (when to kill, the wave that starts after)
    "running": (_while_wave_1_runs, 2),
}


def _completed(detail: Detail) -> dict[str, str]:
    return {k: s["completed_at"] for k, s in _planned(detail).items()
            if s["status"] == "completed"}


async def _start(stack: Cluster) -> tuple[str, Proc, list[Proc]]:
    port, model_port = free_port(), free_port()
    url = f"http://127.0.0.1:{port}"
    await stack.create_user("alice")
    model = stack.start_demo_model(model_port)
    server = stack.start_server(port)
    tokens = [await stack.create_worker_token(n) for n in ("r1", "r2")]
    await wait_healthy(url, server)
    await wait_port(model_port, model)
    workers = [stack.start_worker(n, t, url, slots=2, model_url=f"http://127.0.0.1:{model_port}/v1")
               for n, t in zip(("r1", "r2"), tokens, strict=True)]
    return url, server, workers


async def _upload_corpus(client: httpx.AsyncClient) -> list[str]:
    files = [("file", (p.name, p.read_bytes())) for p in corpus_files()]
    resp = await client.post("/api/v1/uploads", files=files)
    assert resp.status_code == 201, resp.text
    return [u["upload_id"] for u in resp.json()["uploads"]]


async def _no_planned_step_succeeded_twice(client: httpx.AsyncClient, detail: Detail) -> None:
    for key, sub in _planned(detail).items():
        history = (await client.get(f"/api/v1/subtasks/{sub['subtask_id']}")).json()
        statuses = [h["status"] for h in history["attempt_history"]]
        assert statuses.count("succeeded") <= 1, (key, statuses)
        if sub["gap"] is None:  # a task that answered did so once
            assert statuses.count("succeeded") == 1, (key, statuses)


@pytest.mark.parametrize("moment", list(MOMENTS))
async def test_the_control_plane_killed_between_waves_resumes_the_plan_once(
    stack: Cluster, moment: str,
) -> None:
    """Killed at `moment`, the restarted control plane starts the next wave, and nothing that
    completed before runs again."""
    when, next_wave = MOMENTS[moment]
    url, server, workers = await _start(stack)
    async with signed_in(url, "alice") as client:
        await wait_workers_online(client, {"r1", "r2"}, [server, *workers])
        sources = await _upload_corpus(client)
        task_id = await submit(client, {"workflow": "research", "sources": sources,
                                        "description": f"{SAMPLE_QUESTION} {SLOW}"})
        before = await wait_task(client, task_id, within=120, what=f"the moment '{moment}'",
                                 procs=[server, *workers], until=when)
        await server.kill()
        killed_at = datetime.now(UTC)

        restarted = stack.start_server(int(url.rsplit(":", 1)[1]), name="server-restarted")
        await wait_healthy(url, restarted)
        detail = await wait_task(client, task_id, within=150, what="the research to finish",
                                 procs=[restarted, *workers],
                                 until=lambda d: d["status"] in ("completed", "failed"))
        assert detail["status"] == "completed", detail["error"]
        for key, completed_at in _completed(before).items():
            assert _completed(detail)[key] == completed_at, key  # done before: not run again
        assert max(s["wave"] for s in _planned(detail).values()) >= next_wave
        for sub in _wave(detail, next_wave):  # the next wave started after the restart
            assert datetime.fromisoformat(sub["started_at"]) > killed_at, sub["name"]
        await _no_planned_step_succeeded_twice(client, detail)
        events = await sse_events(client, task_id, until={"task_complete"}, last_event_id=0)
    keys = Counter(s["key"] for s in detail["subtasks"])
    assert all(n == 1 for n in keys.values()), keys
    starts = Counter(e["data"]["wave"] for e in events
                     if e["type"] == "notice" and "wave" in e["data"])
    assert starts[next_wave + 1] == 1, starts  # announced once, not again by the restart
    assert all(n == 1 for n in starts.values()), starts
