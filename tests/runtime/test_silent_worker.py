"""A worker whose attempt's lease ran out (it stopped heartbeating: cut off, frozen) gets no new
work that a worker heard from could run, until it is heard from again. Its expired attempts free
its slots, so without this it looked the freest worker and got their retries, which expired in
turn: a network blip a little longer than the lease failed a whole task (`tests/faults`, the
worker cut off). Work only a silent worker could run still goes to it, and fails after its
attempts if it never answers (`tests/e2e/test_bad_input.py`, the review on a fake
`claude_code` worker), rather than waiting for it forever."""

from __future__ import annotations

import json
import uuid

from websockets.asyncio.client import connect

from shoal import admin
from shoal.api.server import running_server
from shoal.config import Settings
from tests.e2e.procs import receive_until
from tests.runtime.harness import echo_worker, login, submit, task_detail, wait_until


async def test_the_retry_of_an_expired_attempt_goes_to_a_worker_that_is_heard_from(
    settings: Settings,
) -> None:
    async with running_server(settings) as srv:
        token = await admin.create_worker_token(srv.services.db, name="silent")
        async with connect(srv.url.replace("http://", "ws://") + "/ws/worker",
                           additional_headers={"Authorization": f"Bearer {token}"}) as silent:
            await silent.send(json.dumps({
                "v": 1, "type": "worker_register", "machine_id": f"silent-{uuid.uuid4()}",
                "machine_name": "silent", "slots": 50, "tools": [{"name": "echo", "local": True}]}))
            registered = await receive_until(silent, lambda m: m["type"] == "registered")
            client = await login(srv, settings)
            task_id = await submit(client, [{"name": "a", "description": "Say a", "tool": "echo"}])
            first = await receive_until(silent, lambda m: m["type"] == "execute_task")
            # It never answers nor heartbeats; a worker that does joins, with one slot to the
            # silent one's fifty, all free once its attempt has expired: the freest by far.
            async with echo_worker(srv, settings, name="heard", slots=1):
                detail = await wait_until(
                    lambda: _ended(client, task_id), what="the task to end",
                    within=4 * settings.lease_seconds)
                sub = (await client.get(f"/api/v1/subtasks/{detail['subtasks'][0]['subtask_id']}"
                                        )).json()
            await client.aclose()
    assert detail["status"] == "completed", detail
    history = sub["attempt_history"]
    assert [a["attempt_id"] for a in history][:1] == [first["attempt_id"]]
    assert history[0]["worker_id"] == registered["worker_id"]
    assert history[0]["status"] == "expired", history
    assert len(history) == 2, history  # the retry ran once, on the worker heard from
    assert history[1]["worker_id"] != registered["worker_id"], history
    assert history[1]["status"] == "succeeded", history


async def _ended(client, task_id: str):  # type: ignore[no-untyped-def]
    detail = await task_detail(client, task_id)
    return detail if detail["status"] in ("completed", "failed") else None
