"""A worker's fast paths (issue 37's twenty-first round): `connection.send_now`, a frame
written in the sender's own turn through the connection's own protocol when nothing could make
`send` wait or refuse, else nothing written (the caller then goes through `send`); and
`WorkerConnection.take`, a step's message handled as it arrives while the reader waits, any
other left to the reader."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.asyncio.server import ServerConnection, serve

from shoal.protocol import Ack, TaskAccepted, TaskResult, WorkerRegister
from shoal.worker.agent import Worker
from shoal.worker.connection import send_now
from tests.runtime.harness import wait_until
from tests.worker.fake_plane import FakeControlPlane, GateTool, execute, make_worker, running


@pytest.fixture
async def pair() -> AsyncIterator[tuple[ClientConnection, asyncio.Queue[str]]]:
    """A client connection to a server that queues each text it receives."""
    got: asyncio.Queue[str] = asyncio.Queue()
    async with _server(got) as port, connect(f"ws://127.0.0.1:{port}") as conn:
        yield conn, got


@contextlib.asynccontextmanager
async def _server(got: asyncio.Queue[str]) -> AsyncIterator[int]:
    async def handler(conn: ServerConnection) -> None:
        async for message in conn:
            got.put_nowait(str(message))

    async with serve(handler, "127.0.0.1", 0) as server:
        yield next(iter(server.sockets)).getsockname()[1]


@pytest.mark.parametrize("compression", [None, "deflate"])
async def test_a_frame_goes_at_once_on_an_open_connection(compression: str | None) -> None:
    """Through the connection's own protocol: its mask, and its compression where agreed."""
    got: asyncio.Queue[str] = asyncio.Queue()
    async with _server(got) as port, connect(f"ws://127.0.0.1:{port}",
                                             compression=compression) as conn:
        assert bool(conn.protocol.extensions) is (compression is not None)
        assert send_now(conn, "first é" * 100)
        assert not conn.protocol.data_to_send()  # handed to the transport already
        await conn.send("second")
        async with asyncio.timeout(5):
            assert [await got.get(), await got.get()] == ["first é" * 100, "second"]


async def test_nothing_is_written_while_the_transport_is_paused_or_the_socket_closed(
    pair: tuple[ClientConnection, asyncio.Queue[str]],
) -> None:
    conn, got = pair
    conn.pause_writing()  # the transport's high-water mark was passed
    assert not send_now(conn, "held")
    assert not conn.protocol.data_to_send()
    conn.resume_writing()
    assert send_now(conn, "after")
    async with asyncio.timeout(5):
        assert await got.get() == "after"
    await conn.close()
    assert not send_now(conn, "closed")
    assert got.empty()


async def test_a_steps_messages_are_read_as_they_arrive_and_a_refusal_by_the_reader(
    plane: FakeControlPlane, gate: GateTool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An attempt there is a slot for and an ack are handled in the connection's
    `data_received`; an attempt to refuse (no free slot) goes to the reader, which answers."""
    read: list[Any] = []
    handle = Worker._handle

    async def reader(self: Worker, raw: str | bytes) -> None:
        read.append(raw)
        await handle(self, raw)

    monkeypatch.setattr(Worker, "_handle", reader)
    plane.features = ["declines"]
    worker = make_worker(plane, tmp_path, gate, slots=1)
    async with running(worker):
        await plane.expect(WorkerRegister)
        warm = execute("none")  # (no such tool: failed at once) now the reader waits
        await plane.send(warm)
        assert (await plane.expect(TaskResult)).status == "failed"
        read.clear()
        first = execute()
        await plane.send(first)
        await plane.expect(TaskAccepted)
        assert read == []  # started as it arrived
        extra = execute()
        await plane.send(extra)
        refused = await plane.expect(TaskResult)
        assert (refused.attempt_id, refused.status) == (extra.attempt_id, "declined")
        assert len(read) == 1
        assert str(extra.attempt_id) in str(read[0])
        gate.gate.set()
        done = await plane.expect(TaskResult)
        assert (done.attempt_id, done.status) == (first.attempt_id, "succeeded")
        await plane.send(Ack(attempt_id=first.attempt_id, accepted=True))
        for other in (extra, warm):
            await plane.send(Ack(attempt_id=other.attempt_id, accepted=True))
        await wait_until(lambda: not worker.delivery.unacked, what="the acks handled")
        assert len(read) == 1  # the acks too
