"""Who may do what, on every route of the published OpenAPI document: nobody signed out (but
the public routes), an owner on their own things, another user on nothing of theirs (404, as
if it did not exist), an admin on the admin routes but not on users' things. A route added
later is in the matrix without anyone listing it; a route the rules below do not fit fails
here until someone decides what it should be.

Another user's id must answer exactly as an unknown one, whatever state its thing is in (an
upload a task reads, a task running, queued, awaiting input, shared, deleted): the second
test puts the owner's things in each of those states and compares every answer. Both run on
SQLite and PostgreSQL, whose in-use and deletion checks differ."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import hypothesis
import pytest
import schemathesis
from schemathesis.core import NotSet
from websockets.asyncio.client import ClientConnection, connect

from shoal import admin
from shoal.api.server import RunningServer, running_server
from shoal.auth.tokens import issue_token_pair
from tests.conftest import make_settings
from tests.runtime.harness import (
    DEADLINE,
    GatedEcho,
    echo_worker,
    login,
    wait_for_status,
    wait_until,
)

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
    """A user's things, by parameter name."""

    ids: dict[str, str]

    def url(self, path: str) -> str:
        return re.sub(r"\{(\w+)\}", lambda m: self.ids[m.group(1)], path)


async def _things_of(server: RunningServer, user: httpx.AsyncClient,
                     root: httpx.AsyncClient) -> Owned:
    """A task with a file and a report that reads an upload, its share, a waiting checkpoint,
    a workflow of the user's own, a webhook, a worker and a worker token."""
    for doc in (NOTE, ASK):
        assert (await user.post("/api/v1/workflows", json={"document": doc})).status_code == 201
    upload = (await user.post("/api/v1/uploads", files=[("file", ("a.md", b"# a"))])).json()
    upload_id = upload["uploads"][0]["upload_id"]
    task = (await user.post("/api/v1/tasks", json={"description": "Cats", "workflow": "note",
                                                   "sources": [upload_id]}))
    task_id = task.json()["task_id"]
    detail = await wait_for_status(user, task_id, "completed")
    subtask_id = detail["subtasks"][0]["subtask_id"]
    share = (await user.post(f"/api/v1/tasks/{task_id}/shares")).json()
    asking, checkpoint_id = await _question(user)
    token = (await root.post("/api/v1/workers/tokens", json={"name": "spare"})).json()
    worker_id = (await user.get("/api/v1/workers")).json()["workers"][0]["worker_id"]
    hook = (await user.post("/api/v1/notifications/webhooks", json={
        "url": "http://127.0.0.1:9/hook", "secret": "a-secret-of-the-user"})).json()
    me = (await user.get("/api/v1/users/me")).json()
    return Owned({
        "task_id": task_id, "subtask_id": subtask_id, "path": "report.md",
        "share_id": share["share_id"], "token": share["url"].rsplit("/", 1)[1],
        "checkpoint_id": checkpoint_id, "upload_id": upload_id, "asking": asking,
        "name": "note", "token_id": token["token_id"], "worker_id": worker_id,
        "user_id": me["user_id"], "webhook_id": hook["id"]})


async def _question(user: httpx.AsyncClient) -> tuple[str, str]:
    """A task of the `ask` workflow waiting for the user's answer, and its checkpoint."""
    asking = (await user.post("/api/v1/tasks", json={"description": "Ask",
                                                     "workflow": "ask"})).json()["task_id"]

    async def waiting() -> str | None:
        page = (await user.get("/api/v1/checkpoints", params={"task_id": asking})).json()
        return page["checkpoints"][0]["checkpoint_id"] if page["checkpoints"] else None

    return asking, await wait_until(waiting, what="the question's checkpoint")


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
async def test_every_route_keeps_each_user_to_their_own(plane: RunningServer) -> None:
    """Anonymous, a worker's token, Alice's own access token once expired, and a revoked
    worker token: 401 (public routes aside). Another user, and an admin, on Alice's things:
    404. Anyone but an admin on an admin route: 403. A list shows another user nothing of
    Alice's. Alice on her own things: never 401, 403 or 404. On SQLite and PostgreSQL."""
    server, settings = plane, plane.services.settings
    await admin.create_user(server.services.db, settings, username="root",
                            password="password123", admin=True)
    client = await login(server, settings)
    root, bob = await login_as(server, "root"), await login(server, settings, "bob")
    anonymous = httpx.AsyncClient(base_url=server.url, timeout=30)
    strangers = {"anonymous": anonymous}
    async with contextlib.AsyncExitStack() as stack:
        for c in (client, root, bob, anonymous):
            stack.push_async_callback(c.aclose)
        await stack.enter_async_context(echo_worker(server, settings))
        owned = await _things_of(server, client, root)
        alices = set(owned.ids.values()) - {"note", "report.md", owned.ids["worker_id"]}
        strangers |= await _unsigned(server, root, owned.ids["user_id"])
        for c in strangers.values():
            if c is not anonymous:
                stack.push_async_callback(c.aclose)
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


# Alice's things in the states a route might look at before it asks whose they are; each
# state names the ids that reach it (the others are the base's).
OWNER_VIEW = ("/api/v1/tasks/{task_id}", "/api/v1/tasks/{task_id}/shares",
              "/api/v1/subtasks/{subtask_id}", "/api/v1/checkpoints/{checkpoint_id}",
              "/api/v1/uploads", "/api/v1/notifications/webhooks", "/api/v1/workflows/{name}")
VOLATILE = {"date"}  # headers that differ between any two answers


@pytest.fixture
async def plane(database_url: str, tmp_path: Path) -> AsyncIterator[RunningServer]:
    """A control plane on each database (their in-use and deletion checks differ), without
    a rate limit in the way of a few hundred requests by one user."""
    settings = make_settings(tmp_path, database_url=database_url,
                             rate_limit_per_minute=100_000)
    async with running_server(settings) as srv:
        yield srv


@pytest.mark.timeout(180)
async def test_another_users_ids_answer_as_unknown_ones_in_every_state(
    plane: RunningServer,
) -> None:
    """With Alice's things each in a state a route may check (an upload a task reads, a task
    running, queued, awaiting input, shared, deleted, a question answered, a webhook off),
    another user and an admin get, for every method of every route that takes her ids (also
    beside ids of Bob's own), byte for byte the status, body and headers that an unknown id
    of the same shape gets, and so on the client socket; and Alice's things are as they
    were."""
    settings = plane.services.settings
    await admin.create_user(plane.services.db, settings, username="root",
                            password="password123", admin=True)
    alice, root = await login(plane, settings), await login_as(plane, "root")
    bob = await login(plane, settings, "bob")
    try:
        async with echo_worker(plane, settings, tools={"echo": GatedEcho()}):
            bobs = await _things_of(plane, bob, root)
            states = await _alices_states(plane, alice, root)
            before = await _owner_view(alice, states)
            probes = _probes((await alice.get("/openapi.json")).json())
            for who, other, own in (("bob", bob, bobs), ("an admin", root, None)):
                await _same_as_unknown(other, who, probes, states, own)
                await _sources_same_as_unknown(other, who, states)
                await _socket_same_as_unknown(plane, other, who, states)
            assert await _owner_view(alice, states) == before
            token = states["completed, shared, reading an upload"].ids["token"]
            assert (await alice.get(f"/s/{token}")).status_code == 200
    finally:
        for c in (alice, root, bob):
            await c.aclose()


async def _alices_states(server: RunningServer, alice: httpx.AsyncClient,
                         root: httpx.AsyncClient) -> dict[str, Owned]:
    """The base's things (with a workflow name only she has); a task awaiting input; a
    question answered and a webhook switched off; a task deleted with its share and its
    upload; one running, reading an upload; one queued behind it and the one awaiting input
    (Alice may have two tasks active)."""
    me = (await alice.get("/api/v1/users/me")).json()
    limited = await root.patch(f"/api/v1/users/{me['user_id']}", json={"max_active_tasks": 2})
    assert limited.status_code == 200, limited.text
    diary = NOTE.replace("name: note", "name: diary")  # a name only Alice's workflow has
    assert (await alice.post("/api/v1/workflows", json={"document": diary})).status_code == 201
    base = Owned((await _things_of(server, alice, root)).ids | {"name": "diary"})
    ids = base.ids
    asking = await alice.get(f"/api/v1/tasks/{ids['asking']}")
    decided = await _decided(alice)
    gone = await _task_reading(alice, running=False)
    share = (await alice.post(f"/api/v1/tasks/{gone['task_id']}/shares")).json()
    assert (await alice.delete(f"/api/v1/tasks/{gone['task_id']}")).status_code == 204
    running = await _task_reading(alice, running=True)
    queued = await alice.post("/api/v1/tasks", json={"description": "Later", "plan": [
        {"name": "later", "description": "later", "tool": "echo"}]})
    assert queued.json()["status"] == "queued", queued.text
    return {
        "completed, shared, reading an upload": base,
        "awaiting input": Owned(ids | {"task_id": ids["asking"],
                                       "subtask_id": asking.json()["subtasks"][0]["subtask_id"]}),
        "answered, its webhook off": Owned(ids | decided),
        "deleted, with its share and upload": Owned(ids | gone | {"share_id": share["share_id"]}),
        "running, reading an upload": Owned(ids | running),
        "queued": Owned(ids | {"task_id": queued.json()["task_id"]}),
    }


async def _decided(alice: httpx.AsyncClient) -> dict[str, str]:
    """A question Alice answered (its task completed) and a webhook she switched off."""
    task_id, checkpoint_id = await _question(alice)
    answered = await alice.post(f"/api/v1/checkpoints/{checkpoint_id}/answer",
                                json={"answer": "Oslo"})
    assert answered.status_code == 200, answered.text
    detail = await wait_for_status(alice, task_id, "completed")
    hook = (await alice.post("/api/v1/notifications/webhooks", json={
        "url": "http://127.0.0.1:9/off", "secret": "a-secret-of-alice-s"})).json()
    off = await alice.patch(f"/api/v1/notifications/webhooks/{hook['id']}",
                            json={"enabled": False})
    assert off.status_code == 200, off.text
    return {"task_id": task_id, "checkpoint_id": checkpoint_id, "webhook_id": hook["id"],
            "subtask_id": detail["subtasks"][0]["subtask_id"]}


async def _task_reading(alice: httpx.AsyncClient, *, running: bool) -> dict[str, str]:
    """A task of Alice's reading an upload of its own: a note, completed; or (`running`) a
    step whose worker holds its attempt at the gate. The ids of the task, its first subtask
    and the upload."""
    sent = await alice.post("/api/v1/uploads", files=[("file", ("b.md", b"# b"))])
    upload_id = sent.json()["uploads"][0]["upload_id"]
    spec: dict[str, Any] = {"workflow": "note"} if not running else {"plan": [
        {"name": "wait", "description": "wait", "tool": "echo", "options": {"gated": True}}]}
    resp = await alice.post("/api/v1/tasks", json={"description": "Read", **spec,
                                                   "sources": [upload_id]})
    assert resp.status_code == 201, resp.text
    task_id = resp.json()["task_id"]

    async def holding() -> dict[str, Any] | None:
        detail = (await alice.get(f"/api/v1/tasks/{task_id}")).json()
        if not detail["subtasks"]:
            return None
        found = await alice.get(f"/api/v1/subtasks/{detail['subtasks'][0]['subtask_id']}")
        attempts = found.json()["attempt_history"]
        return detail if attempts and attempts[-1]["status"] == "running" else None

    detail = await (wait_until(holding, what=f"task {task_id}'s attempt at the gate")
                    if running else wait_for_status(alice, task_id, "completed"))
    return {"task_id": task_id, "subtask_id": detail["subtasks"][0]["subtask_id"],
            "upload_id": upload_id}


@dataclass(frozen=True)
class Probe:
    """An operation that takes ids of a user's things: in its path (all but a file's path,
    which names a file only within its subtask) and in its query (named `*_id`)."""

    method: str
    path: str
    body: Any
    query: dict[str, Any]
    ids: tuple[str, ...]

    async def send(self, client: httpx.AsyncClient, ids: dict[str, str]) -> httpx.Response:
        """The answer to this operation on `ids` (by parameter name)."""
        query = self.query | {n: ids[n] for n in self.ids if "{" + n + "}" not in self.path}
        return await _send(client, self.method, Owned(ids).url(self.path), self.body, query)


def _probes(spec: dict[str, Any]) -> list[Probe]:
    """Every operation of the document that takes ids of a user's things (not the shared
    fleet's or an admin's, not a public one)."""
    found = []
    for method, path, body, query in _operations(spec):
        if PUBLIC.match(path) or (method, path) in ADMIN_ONLY | SHARED:
            continue
        params = spec["paths"][path][method.lower()].get("parameters", [])
        ids = [n for n in re.findall(r"\{(\w+)\}", path) if n != "path"] + [
            p["name"] for p in params if p["in"] == "query" and p["name"].endswith("_id")]
        if ids:
            found.append(Probe(method, path, body, query, tuple(ids)))
    return found


def _unknown_like(name: str, value: str) -> str:
    """A value of the same shape as `value` that names nothing."""
    if name.endswith("_id"):
        return str(uuid.uuid4())
    return ("x" + uuid.uuid4().hex)[:len(value)]


def _as_seen(resp: httpx.Response, ids: dict[str, str]) -> tuple[int, dict[str, str], str]:
    """An answer with each of `ids` in its body written as its parameter's name: its
    status, its headers (but the date) and its body (of a stream, nothing)."""
    stream = resp.headers.get("content-type", "").startswith("text/event-stream")
    body = "<stream>" if stream else resp.text
    for name, value in ids.items():
        body = body.replace(value, "{" + name + "}")
    headers = {k: v for k, v in resp.headers.items() if k not in VOLATILE}
    return resp.status_code, headers, body


async def _same_as_unknown(other: httpx.AsyncClient, who: str, probes: list[Probe],
                           states: dict[str, Owned], own: Owned | None) -> None:
    """Every operation that takes Alice's ids answers `other` on hers, in each state, as on
    ids of the same shape that name nothing; one that takes two ids, also on one of hers
    beside one of `other`'s own (`own`): her share of his task, say."""
    unknown: dict[tuple[str, str, frozenset[str]], tuple[int, dict[str, str], str]] = {}
    asked: set[tuple[str, str, tuple[str, ...]]] = set()
    for state, owned in states.items():
        for probe in probes:
            mixed = [own.ids | {n: owned.ids[n]} for n in probe.ids] \
                if own is not None and len(probe.ids) > 1 else []
            for hers in (owned.ids, *mixed):
                if (probe.method, probe.path, tuple(hers[n] for n in probe.ids)) in asked:
                    continue  # the same ids as in a state before
                asked.add((probe.method, probe.path, tuple(hers[n] for n in probe.ids)))
                foreign = {n: hers[n] for n in probe.ids if hers[n] == owned.ids[n]}
                key = (probe.method, probe.path, frozenset(foreign))
                if key not in unknown:
                    strange = {n: _unknown_like(n, v) for n, v in foreign.items()}
                    unknown[key] = _as_seen(await probe.send(other, hers | strange), strange)
                seen = _as_seen(await probe.send(other, hers), foreign)
                assert seen == unknown[key], \
                    f"{probe.method} {probe.path} as {who}, {state}, on {foreign}: {seen} " \
                    f"where an unknown id gets {unknown[key]}"


async def _sources_same_as_unknown(other: httpx.AsyncClient, who: str,
                                   states: dict[str, Owned]) -> None:
    """A task of `other`'s that would read Alice's upload (read by her tasks, or deleted) is
    refused as one that would read an unknown upload."""
    for upload_id, state in {o.ids["upload_id"]: s for s, o in states.items()}.items():
        answers = []
        for sent in (upload_id, str(uuid.uuid4())):
            resp = await other.post("/api/v1/tasks", json={
                "description": "Mine", "sources": [sent],
                "plan": [{"name": "mine", "description": "mine", "tool": "echo"}]})
            answers.append(_as_seen(resp, {"upload_id": sent}))
        assert answers[0] == answers[1], f"sources as {who}, {state}: {answers}"


async def _socket_same_as_unknown(server: RunningServer, other: httpx.AsyncClient, who: str,
                                  states: dict[str, Owned]) -> None:
    """On the client socket, subscribing to Alice's task (its history replayed, under its
    workflow's names) and answering her question: the frames an unknown id gets."""
    token = other.headers["Authorization"].removeprefix("Bearer ")
    async with connect(server.url.replace("http://", "ws://") + "/ws",
                       additional_headers={"Authorization": f"Bearer {token}"},
                       open_timeout=10) as ws:
        frames = {"task_id": {"type": "subscribe", "since": 0, "names": "workflow"},
                  "checkpoint_id": {"type": "answer", "answer": "Oslo"}}
        asked: set[str] = set()
        for state, owned in states.items():
            for name, frame in frames.items():
                if owned.ids[name] in asked:
                    continue
                asked.add(owned.ids[name])
                theirs = await _exchange(ws, frame | {name: owned.ids[name]}, name)
                nobodys = await _exchange(ws, frame | {name: str(uuid.uuid4())}, name)
                assert theirs == nobodys, f"{frame['type']} as {who}, {state}"


async def _exchange(ws: ClientConnection, frame: dict[str, Any], name: str) -> list[Any]:
    """The frames a socket sends back for `frame`, up to the `pong` of a ping sent after it
    (and a subscription's `caught_up`, which its stream sends when it will), but their time,
    with the id of `name` written as its name, in a set order."""
    await ws.send(json.dumps(frame))
    await ws.send(json.dumps({"type": "ping"}))
    last = {"pong", "caught_up"} if frame["type"] == "subscribe" else {"pong"}
    got: list[str] = []
    async with asyncio.timeout(DEADLINE):
        while last:
            sent = json.loads(await ws.recv())
            sent.pop("timestamp", None)
            last.discard(sent["type"])
            got.append(json.dumps(sent).replace(frame[name], "{" + name + "}"))
    return sorted(got)


async def _owner_view(alice: httpx.AsyncClient, states: dict[str, Owned]) -> dict[str, Any]:
    """What Alice sees of her things in every state (her share link's use aside: opening it
    marks it)."""
    urls = sorted({owned.url(path) for owned in states.values() for path in OWNER_VIEW})
    return {url: ((resp := await alice.get(url)).status_code, resp.json()) for url in urls}
