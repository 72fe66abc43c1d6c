"""The control plane's side of batched frames (ADR 0024), driven over a real `/ws/worker`
socket by a worker that speaks the protocol itself: several attempts of one commit reach a
worker that lists `batches` in one `execute_tasks` frame, a `task_results` frame is stored in
one commit and acknowledged in one `acks` message, and a worker that does not list `batches`
only ever gets single messages."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect

from shoal import admin
from shoal.api import worker_ws
from shoal.api.direct import Direct
from shoal.api.server import RunningServer, running_server
from shoal.config import Settings
from shoal.runtime import executes
from shoal.runtime.jobs import Result
from tests.api.test_fanout import Tap
from tests.conftest import make_settings
from tests.e2e.procs import receive_until
from tests.runtime.harness import login, submit, subtask_detail, task_detail, wait_until

PLAN = [{"name": n, "description": f"step {n}", "tool": "echo"} for n in ("a", "b", "c")]


@pytest.fixture
async def server(settings: Settings) -> AsyncIterator[RunningServer]:
    async with running_server(settings) as srv:
        yield srv


async def _register(srv: RunningServer, features: list[str],
                    compression: str | None = "deflate",
                    slots: int = 4) -> tuple[ClientConnection, Any]:
    token = await admin.create_worker_token(srv.services.db, name=f"raw-{uuid.uuid4().hex[:6]}")
    ws = await connect(srv.url.replace("http://", "ws://") + "/ws/worker",
                       additional_headers={"Authorization": f"Bearer {token}"},
                       compression=compression)
    await ws.send(json.dumps({
        "v": 1, "type": "worker_register", "machine_id": f"raw-{uuid.uuid4()}",
        "machine_name": "raw", "slots": slots, "tools": [{"name": "echo", "local": True}],
        "features": features,
    }))
    registered = await receive_until(ws, lambda m: m["type"] == "registered")
    return ws, registered


def _result(run: dict[str, Any]) -> dict[str, Any]:
    return {"v": 1, "type": "task_result", "attempt_id": run["attempt_id"],
            "fence": run["fence"], "status": "succeeded", "output": f"did {run['name']}"}


async def test_a_batching_worker_gets_and_gives_one_frame_per_moment(
    server: RunningServer, settings: Settings
) -> None:
    client = await login(server, settings)
    ws, registered = await _register(server, ["acks", "batches"])
    async with ws:
        assert "batches" in registered["features"]
        commits = 0
        process = server.services.runtime._process

        async def counted(batch: Any, **how: Any) -> None:
            nonlocal commits
            commits += any(isinstance(job, Result) for job in batch)
            await process(batch, **how)

        server.services.runtime._process = counted  # type: ignore[method-assign]
        task_id = await submit(client, PLAN)
        frame = await receive_until(ws, lambda m: m["type"].startswith("execute_task"))
        assert frame["type"] == "execute_tasks"
        assert sorted(t["name"] for t in frame["tasks"]) == ["a", "b", "c"]
        await ws.send(json.dumps({"v": 1, "type": "task_results",
                                  "results": [_result(run) for run in frame["tasks"]]}))
        acks = await receive_until(ws, lambda m: m["type"] in ("ack", "acks"))
        assert acks["type"] == "acks"
        assert sorted(a["attempt_id"] for a in acks["acks"]) == sorted(
            run["attempt_id"] for run in frame["tasks"])
        assert all(a["accepted"] for a in acks["acks"])
        assert commits == 1  # the three results were stored together
        detail = await wait_until(
            lambda: _finished(client, task_id), what="the task to complete")
        assert detail["status"] == "completed"
        outputs = sorted([(await subtask_detail(client, s["subtask_id"]))["output"]["text"]
                          for s in detail["subtasks"]])
        assert outputs == ["did a", "did b", "did c"]
    await client.aclose()


async def test_a_large_dispatch_goes_out_in_growing_parts(
    server: RunningServer, settings: Settings
) -> None:
    """ADR 0054: the attempts of one commit past FIRST_SEND go out while the rest are made,
    the first FIRST_SEND, then parts each twice the one before; each once, in the commit's
    order."""
    first = executes.FIRST_SEND
    count = 3 * first + 5  # parts of `first`, `2 * first` and the 5 left
    plan = [{"name": f"n{i:03d}", "description": f"step {i}", "tool": "echo"}
            for i in range(count)]
    client = await login(server, settings)
    ws, _ = await _register(server, ["acks", "batches"], slots=count)
    async with ws:
        await submit(client, plan)
        parts: list[list[str]] = []
        while sum(map(len, parts)) < count:
            frame = await receive_until(ws, lambda m: m["type"].startswith("execute_task"))
            runs = frame["tasks"] if frame["type"] == "execute_tasks" else [frame]
            parts.append([run["name"] for run in runs])
        assert [len(part) for part in parts] == [first, 2 * first, 5]
        names = [name for part in parts for name in part]
        assert sorted(names) == [item["name"] for item in plan]  # each once
        assert names == sorted(names)  # in the order they were dispatched
    await client.aclose()


async def test_a_worker_without_batches_gets_single_messages(
    server: RunningServer, settings: Settings
) -> None:
    client = await login(server, settings)
    ws, registered = await _register(server, ["acks"])
    async with ws:
        assert "batches" in registered["features"]  # offered, but this worker did not ask
        await submit(client, PLAN)
        runs = [await receive_until(ws, lambda m: m["type"].startswith("execute_task"))
                for _ in PLAN]
        assert [r["type"] for r in runs] == ["execute_task"] * 3
    await client.aclose()


async def _finished(client: Any, task_id: str) -> dict[str, Any] | None:
    detail = await task_detail(client, task_id)
    return detail if detail["status"] in ("completed", "failed") else None


class Built:
    """The server's side of worker sockets as `worker_ws._write` finds it, with each socket's
    frames counted as its transport writes them (`taps`) and as `websockets` builds them
    (`built`: its `send_text`, which a frame written as bytes skips)."""

    def __init__(self) -> None:
        self.taps: list[Tap] = []
        self.raws: list[Any] = []  # each socket's protocol (`Direct.raw`)
        self.built = 0

    def find(self, ws: Any) -> Direct | None:
        found = FIND(ws)
        raw = found.raw if found is not None else None
        if raw is not None:
            self.raws.append(raw)
            self.taps.append(tap := Tap(raw.transport))
            raw.transport, send_text = tap, raw.conn.send_text

            def counted(*args: Any, **kwargs: Any) -> Any:
                self.built += 1
                return send_text(*args, **kwargs)

            raw.conn.send_text = counted
        return found


FIND = worker_ws.direct_of
TEXT, COMPRESSED = 0x81, 0xC1  # a whole text frame's first byte, without and with RSV1


@pytest.mark.parametrize("compressed", [False, True], ids=["plain", "compressed"])
async def test_frames_to_a_worker_are_its_bytes_on_the_wire_unless_it_agreed_to_compression(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, compressed: bool
) -> None:
    """A plain worker socket gets each frame written to its transport as bytes (`websockets`
    builds none of them), and reads it as any frame; a socket that agreed to compression gets
    its frames compressed, through the server's own `send`."""
    built = Built()
    monkeypatch.setattr(worker_ws, "direct_of", built.find)
    settings = make_settings(tmp_path, ws_compression=compressed)
    async with running_server(settings) as srv:
        client = await login(srv, settings)
        ws, registered = await _register(srv, ["acks"], "deflate" if compressed else None)
        async with ws:
            assert registered["type"] == "registered"
            await submit(client, PLAN)
            runs = [await receive_until(ws, lambda m: m["type"] == "execute_task")
                    for _ in PLAN]
            assert sorted(r["name"] for r in runs) == ["a", "b", "c"]
        await client.aclose()
    texts = [first for tap in built.taps for first in tap.firsts
             if first & 0x0F == 0x1]  # text frames (not a close or a pong)
    assert len(texts) >= 4  # `registered` and the three tasks, at least
    if compressed:
        assert set(texts) == {COMPRESSED}
        assert built.built == len(texts)
    else:
        assert set(texts) == {TEXT}
        assert built.built == 0


async def test_a_frame_to_a_worker_leaves_at_once_and_never_overtakes_one_held_back(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A frame for a worker goes to its transport in the sender's own turn when nothing waits
    before it (no task woken to write it); while the transport is paused the frames wait, in
    order, and one sent once it is writable again, before the frame held through the pause has
    gone, goes after it (never before)."""
    built = Built()
    monkeypatch.setattr(worker_ws, "direct_of", built.find)
    settings = make_settings(tmp_path)
    async with running_server(settings) as srv:
        ws, registered = await _register(srv, ["acks"], None)
        async with ws:
            assert registered["type"] == "registered"
            (conn,) = srv.services.runtime.fleet.connections()
            (raw,), (tap,) = built.raws, built.taps

            async def probe(n: int) -> None:
                await conn.send(json.dumps({"v": 1, "type": "probe", "n": n}))

            written = len(tap.firsts)
            await probe(0)
            assert len(tap.firsts) == written + 1  # written by `send` itself
            raw.pause_writing()
            await probe(1)  # queued: the writer takes it and waits for the transport
            await wait_until(lambda: len(raw.writable._waiters) == 1,
                             what="the writer holding frame 1 until the socket is writable")
            raw.resume_writing()  # writable, but frame 1 has not gone yet
            await probe(2)  # nothing queued, yet it waits for frame 1
            await probe(3)
            assert len(tap.firsts) == written + 1
            got = [await receive_until(ws, lambda m: m["type"] == "probe") for _ in range(4)]
            assert [m["n"] for m in got] == [0, 1, 2, 3]
            await probe(4)  # nothing waits now: at once again
            assert len(tap.firsts) == written + 4 + 1
