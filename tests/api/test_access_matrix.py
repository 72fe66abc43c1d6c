"""Who may do what, on every route of the published OpenAPI document: nobody signed out (but
the public routes), an owner on their own things, another user on nothing of theirs (404, as
if it did not exist), an admin on the admin routes but not on users' things. A route added
later is in the matrix without anyone listing it; a route the rules below do not fit fails
here until someone decides what it should be."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import hypothesis
import pytest
import schemathesis
from schemathesis.core import NotSet

from shoal import admin
from shoal.api.server import RunningServer
from shoal.auth.tokens import issue_token_pair
from shoal.worker.agent import Worker
from tests.runtime.harness import login, wait_for_status, wait_until

PUBLIC = re.compile(r"^/(healthz|readyz|metrics)$|^/api/v1/auth/|^/s/")
ADMIN_ONLY = {("POST", "/api/v1/users"), ("PATCH", "/api/v1/users/{user_id}"),
              ("GET", "/api/v1/workers/tokens"), ("POST", "/api/v1/workers/tokens"),
              ("DELETE", "/api/v1/workers/tokens/{token_id}")}
# What every signed-in user shares: the fleet, the server's workflows, one's own account.
SHARED = {("GET", "/api/v1/workers"), ("GET", "/api/v1/workers/{worker_id}"),
          ("GET", "/api/v1/workflows"), ("GET", "/api/v1/workflows/schema"),
          ("GET", "/api/v1/users/me")}
ONE_EXAMPLE = hypothesis.settings(database=None, derandomize=True, max_examples=10,
                                  phases=[hypothesis.Phase.generate])
ASK = """\
name: ask
version: 1
description: Asks the user one thing.
roles: {}
steps:
  - {id: question, kind: human, question: "Which city?", writes: city}
"""
NOTE = """\
name: note
version: 1
description: One note, which is the report.
roles:
  writer: {prompt: "# A note on {query}", tools: [echo]}
steps:
  - {id: write, kind: agent, role: writer, writes: report}
result: report
"""


@dataclass
class Owned:
    """Alice's things, by path parameter name."""

    ids: dict[str, str]

    def url(self, path: str) -> str:
        return re.sub(r"\{(\w+)\}", lambda m: self.ids[m.group(1)], path)


async def _alices_things(server: RunningServer, alice: httpx.AsyncClient,
                         root: httpx.AsyncClient) -> Owned:
    """A task with a file and a report, its share, a waiting checkpoint, an upload, a
    workflow of her own, a webhook, a worker and a worker token."""
    for doc in (NOTE, ASK):
        assert (await alice.post("/api/v1/workflows", json={"document": doc})).status_code == 201
    task = (await alice.post("/api/v1/tasks", json={"description": "Cats", "workflow": "note"}))
    task_id = task.json()["task_id"]
    detail = await wait_for_status(alice, task_id, "completed")
    subtask_id = detail["subtasks"][0]["subtask_id"]
    share = (await alice.post(f"/api/v1/tasks/{task_id}/shares")).json()
    asking = (await alice.post("/api/v1/tasks", json={"description": "Ask",
                                                      "workflow": "ask"})).json()["task_id"]

    async def waiting() -> str | None:
        page = (await alice.get("/api/v1/checkpoints", params={"task_id": asking})).json()
        return page["checkpoints"][0]["checkpoint_id"] if page["checkpoints"] else None

    checkpoint_id = await wait_until(waiting, what="the question's checkpoint")
    upload = (await alice.post("/api/v1/uploads", files=[("file", ("a.md", b"# a"))])).json()
    token = (await root.post("/api/v1/workers/tokens", json={"name": "spare"})).json()
    worker_id = (await alice.get("/api/v1/workers")).json()["workers"][0]["worker_id"]
    hook = (await alice.post("/api/v1/notifications/webhooks", json={
        "url": "http://127.0.0.1:9/hook", "secret": "a-secret-of-alice-s"})).json()
    me = (await alice.get("/api/v1/users/me")).json()
    return Owned({
        "task_id": task_id, "subtask_id": subtask_id, "path": "report.md",
        "share_id": share["share_id"], "token": share["url"].rsplit("/", 1)[1],
        "checkpoint_id": checkpoint_id, "upload_id": upload["uploads"][0]["upload_id"],
        "name": "note", "token_id": token["token_id"], "worker_id": worker_id,
        "user_id": me["user_id"], "webhook_id": hook["id"]})


def _operations(spec: dict[str, Any]) -> list[tuple[str, str, Any, dict[str, Any]]]:
    """(method, path, a valid body, query) of every operation in the document."""
    out = []
    for result in schemathesis.openapi.from_dict(spec).get_all_operations():
        op = result.ok()
        case = hypothesis.find(op.as_strategy(), lambda _: True, settings=ONE_EXAMPLE)
        body = None if isinstance(case.body, NotSet) else case.body
        out.append((op.method.upper(), op.path, body, dict(case.query or {})))
    return out


async def _send(client: httpx.AsyncClient, method: str, url: str, body: Any,
                query: dict[str, Any]) -> httpx.Response:
    """The answer; of a stream (server-sent events), its status and headers only."""
    async with client.stream(method, url, params=query, json=body) as resp:
        if not resp.headers.get("content-type", "").startswith("text/event-stream"):
            await resp.aread()
        return resp


@pytest.mark.timeout(180)
async def test_every_route_keeps_each_user_to_their_own(
    server: RunningServer, client: httpx.AsyncClient, worker: Worker,
) -> None:
    """Anonymous, a worker's token, Alice's own access token once expired, and a revoked
    worker token: 401 (public routes aside). Another user, and an admin, on Alice's things:
    404. Anyone but an admin on an admin route: 403. A list shows another user nothing of
    Alice's. Alice on her own things: never 401, 403 or 404."""
    settings = server.services.settings
    await admin.create_user(server.services.db, settings, username="root",
                            password="password123", admin=True)
    root, bob = await login_as(server, "root"), await login(server, settings, "bob")
    anonymous = httpx.AsyncClient(base_url=server.url, timeout=30)
    strangers = {"anonymous": anonymous}
    try:
        owned = await _alices_things(server, client, root)
        alices = set(owned.ids.values()) - {"note", "report.md", owned.ids["worker_id"]}
        strangers |= await _unsigned(server, root, owned.ids["user_id"])
        spec = (await client.get("/openapi.json")).json()
        ops = _operations(spec)
        assert len(ops) > 40
        for method, path, body, query in ops:
            url, where = owned.url(path), f"{method} {path}"
            for who, stranger in ([] if PUBLIC.match(path) else strangers.items()):
                resp = await _send(stranger, method, url, body, query)
                assert resp.status_code == 401, f"{where} as {who}: {resp.status_code}"
            if PUBLIC.match(path) or ("{" not in path and method != "GET"):
                continue  # nothing of anyone's to reach, or it makes something new
            for who, other in (("bob", bob), ("root", root)):
                resp = await _send(other, method, url, body, query)
                if (method, path) in ADMIN_ONLY:
                    expected = {403} if who == "bob" else set(range(200, 300)) | {409, 422}
                elif (method, path) in SHARED:
                    expected = set(range(200, 300))
                elif "{" in path:
                    expected = {404}
                else:  # a list: theirs only
                    expected = set(range(200, 300))
                    assert not any(i in resp.text for i in alices), f"{where} as {who}"
                assert resp.status_code in expected, f"{where} as {who}: {resp.status_code}"
        for method, path, body, query in ops:
            if PUBLIC.match(path) or method == "DELETE" or (method, path) in ADMIN_ONLY:
                continue
            resp = await _send(client, method, owned.url(path), body, query)
            assert resp.status_code not in (401, 403, 404), \
                f"{method} {path} as the owner: {resp.status_code} {resp.text[:200]}"
    finally:
        for c in (root, bob, *strangers.values()):
            await c.aclose()


async def _unsigned(server: RunningServer, root: httpx.AsyncClient,
                    alice_id: str) -> dict[str, httpx.AsyncClient]:
    """Clients whose credentials must not sign anyone in on a user's route: a live worker
    token, a revoked one, and Alice's own access token after it expired."""
    live = (await root.post("/api/v1/workers/tokens", json={"name": "live"})).json()
    gone = (await root.post("/api/v1/workers/tokens", json={"name": "revoked"})).json()
    assert (await root.delete(f"/api/v1/workers/tokens/{gone['token_id']}")).status_code < 300
    expired = issue_token_pair(uuid.UUID(alice_id), username="alice", is_admin=False,
                               settings=server.services.settings,
                               now=datetime.now(UTC) - timedelta(days=1)).access_token
    found = {}
    for who, token in (("a worker token", live["token"]), ("a revoked worker token",
                                                          gone["token"]),
                       ("an expired token", expired)):
        found[who] = httpx.AsyncClient(base_url=server.url, timeout=30,
                                       headers={"Authorization": f"Bearer {token}"})
    return found


async def login_as(server: RunningServer, name: str) -> httpx.AsyncClient:
    """A client signed in as an existing user."""
    c = httpx.AsyncClient(base_url=server.url, timeout=30)
    resp = await c.post("/api/v1/auth/login", json={"username": name, "password": "password123"})
    resp.raise_for_status()
    c.headers["Authorization"] = f"Bearer {resp.json()['access_token']}"
    return c
