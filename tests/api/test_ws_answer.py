"""A workflow's question answered over the client WebSocket (`{"type": "answer"}`): the same
path as `POST /api/v1/checkpoints/{id}/answer`, so the task goes on with the answer, and each
refusal is the route's code and message in an `error` frame (the socket stays open)."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import ClientConnection, connect

from shoal.api.client_ws import Answer, BadMessage, _parse
from shoal.api.server import RunningServer
from shoal.config import Settings
from shoal.worker.agent import Worker
from tests.runtime.harness import DEADLINE, login, subtask_detail, task_detail

ASKING = """\
name: asking
version: 1
description: Ask who the proposal is for, then draft it for them.
roles:
  drafter: {prompt: "Draft on {query} for {audience}", tools: [echo]}
steps:
  - {id: audience, kind: human, question: "Who is the proposal on {query} for?"}
  - {id: draft, kind: agent, role: drafter, after: [audience]}
"""


def _socket(server: RunningServer, client: httpx.AsyncClient) -> Any:
    token = client.headers["Authorization"].removeprefix("Bearer ")
    return connect(server.url.replace("http://", "ws://") + "/ws",
                   additional_headers={"Authorization": f"Bearer {token}"}, open_timeout=10,
                   max_size=None)


async def _until(ws: ClientConnection, kind: str, **data: Any) -> dict[str, Any]:
    """The next frame of type `kind` (whose data has `data`); the frames before it are events
    of the subscription, or `subscribed`/`caught_up`."""
    async with asyncio.timeout(DEADLINE):
        while True:
            frame = json.loads(await ws.recv())
            if frame["type"] == kind and all(frame["data"].get(k) == v for k, v in data.items()):
                return dict(frame)
            assert "seq" in frame or frame["type"] in {"subscribed", "caught_up"}, frame


async def _refused(ws: ClientConnection, rest: httpx.AsyncClient, checkpoint_id: str,
                   answer: str) -> tuple[dict[str, Any], httpx.Response]:
    """The socket's `error` frame for this answer, and the REST route's answer to it."""
    await ws.send(json.dumps({"type": "answer", "checkpoint_id": checkpoint_id,
                              "answer": answer}))
    error = (await _until(ws, "error"))["data"]
    resp = await rest.post(f"/api/v1/checkpoints/{checkpoint_id}/answer", json={"answer": answer})
    body = resp.json()
    assert (error["code"], error["message"]) == (body["error"], body["message"]), (error, body)
    return error, resp


@pytest.fixture
async def bob(server: RunningServer, settings: Settings) -> Any:
    """Another user, signed in."""
    other = await login(server, settings, "bob")
    try:
        yield other
    finally:
        await other.aclose()


async def test_a_question_answered_over_the_socket_feeds_the_next_step(
    server: RunningServer, client: httpx.AsyncClient, bob: httpx.AsyncClient, worker: Worker
) -> None:
    """Another user's socket, an empty, blank or 100 kB answer and unknown ids are refused as
    the REST route refuses them (and the question stays open); then the answer is taken, the
    next step's prompt has it, and answering again is the route's 409."""
    assert (await client.post("/api/v1/workflows", json={"document": ASKING})).status_code == 201
    resp = await client.post("/api/v1/tasks", json={"description": "bike lanes",
                                                    "workflow": "asking"})
    assert resp.status_code == 201, resp.text
    task_id = resp.json()["task_id"]
    async with _socket(server, client) as ws, _socket(server, bob) as theirs:
        await ws.send(json.dumps({"type": "subscribe", "task_id": task_id, "since": 0}))
        ready = (await _until(ws, "checkpoint_ready", reason="question"))["data"]
        assert ready["question"] == "Who is the proposal on bike lanes for?"
        cid = ready["checkpoint_id"]

        error, rest = await _refused(theirs, bob, cid, "Bob's answer")
        assert (rest.status_code, error["code"], error["field"]) == (
            404, "not_found", "checkpoint_id")
        for bad in ("", "   \n", "x" * 100_000):
            error, rest = await _refused(ws, client, cid, bad)
            assert (rest.status_code, error["code"], error["field"]) == (
                422, "validation_error", "answer"), bad[:10]
            assert rest.json()["details"][0]["field"] == "answer"
        for unknown in (str(uuid.uuid4()), "not-an-id"):
            error, rest = await _refused(ws, client, unknown, "Somebody")
            assert (rest.status_code, error["code"], error["field"]) == (
                404, "not_found", "checkpoint_id"), unknown
        assert (await task_detail(client, task_id))["status"] == "awaiting_input"

        await ws.send(json.dumps({"type": "answer", "checkpoint_id": cid,
                                  "answer": "  The city council  "}))
        answered = await _until(ws, "answered")
        assert answered["data"] == {"checkpoint_id": cid, "status": "answered"}
        decided = await _until(ws, "checkpoint_decided")
        assert (decided["data"]["checkpoint_id"], decided["data"]["decision"]) == (cid, "answer")
        await _until(ws, "task_complete")

        error, rest = await _refused(ws, client, cid, "Again")
        assert (rest.status_code, error["code"]) == (409, "checkpoint_decided")
        assert error["message"] == "This checkpoint was already decided (answered)."
        await ws.send(json.dumps({"type": "ping"}))  # the socket stays open after each error
        await _until(ws, "pong")

    detail = await task_detail(client, task_id)
    assert detail["status"] == "completed", detail
    subs = {s["key"]: s for s in detail["subtasks"]}
    draft = await subtask_detail(client, subs["draft#1"]["subtask_id"])
    assert draft["description"] == "Draft on bike lanes for The city council"
    assert "Draft on bike lanes for The city council" in json.dumps(draft["output"])
    checkpoint = (await client.get(f"/api/v1/checkpoints/{cid}")).json()
    assert (checkpoint["status"], checkpoint["notes"]) == ("answered", "The city council")


def test_an_answer_frame_is_typed_and_named_among_the_messages() -> None:
    """`answer` is one of the socket's messages (also under `data`); an unknown type's error
    names it among the others."""
    msg = _parse(json.dumps({"type": "answer", "data": {"checkpoint_id": "c", "answer": "a"}}))
    assert msg == Answer(type="answer", checkpoint_id="c", answer="a")
    with pytest.raises(BadMessage) as missing:
        _parse(json.dumps({"type": "answer", "checkpoint_id": "c"}))
    assert missing.value.field == "answer"
    with pytest.raises(BadMessage) as unknown:
        _parse(json.dumps({"type": "reply"}))
    assert "subscribe, unsubscribe, ping, answer or auth" in unknown.value.message
