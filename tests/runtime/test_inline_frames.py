"""A worker's messages read as they arrive (`direct.take_texts`, issue 37's twenty-first
round): under uvicorn, a message that reaches a worker socket while nothing waits in its ASGI
queue is read and handled in the protocol's own `data_received`, not by the endpoint's reader
a turn of the event loop later; one the server cannot read goes to the reader, which answers
it, and no message overtakes one queued before it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

from shoal.api import direct, worker_ws
from shoal.api.server import running_server
from shoal.config import Settings
from tests.e2e.procs import receive_until
from tests.runtime.harness import login, submit, task_detail, wait_until
from tests.runtime.test_batched_frames import _register, _result

PLAN = [{"name": n, "description": f"step {n}", "tool": "echo"} for n in ("a", "b")]


class Seen:
    """What the server did with a worker's messages, in order: an attempt id for each result
    the runtime was handed, `error` for each message the reader answered as unreadable; and
    the attempt ids of the results read as they arrived (`taken`)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.order: list[str] = []
        self.taken: list[str] = []
        self.raws: list[Any] = []
        take_texts, describe = worker_ws.take_texts, worker_ws.describe

        def counted_take_texts(raw: Any, take: Any) -> Any:
            self.raws.append(raw)

            def counted(text: str) -> bool:
                took = take(text)
                if took and '"task_result"' in text:
                    self.taken.append(json.loads(text)["attempt_id"])
                return took

            return take_texts(raw, counted)

        def described(exc: Any) -> str:
            self.order.append("error")
            return describe(exc)

        monkeypatch.setattr(worker_ws, "take_texts", counted_take_texts)
        monkeypatch.setattr(worker_ws, "describe", described)

    def watch(self, runtime: Any) -> None:
        post = runtime.post_result

        def posted(conn: Any, msg: Any, *rest: Any) -> None:
            self.order.append(str(msg.attempt_id))
            post(conn, msg, *rest)

        runtime.post_result = posted


@pytest.mark.parametrize("compression", [None, "deflate"], ids=["plain", "compressed"])
async def test_a_workers_messages_are_read_as_they_arrive_and_none_overtakes_another(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, compression: str | None
) -> None:
    seen = Seen(monkeypatch)
    async with running_server(settings) as srv:
        seen.watch(srv.services.runtime)
        client = await login(srv, settings)
        ws, registered = await _register(srv, ["acks"], compression)
        async with ws:
            assert registered["type"] == "registered"
            task_id = await submit(client, PLAN)
            runs = [await receive_until(ws, lambda m: m["type"] == "execute_task")
                    for _ in PLAN]
            first, second = sorted(runs, key=lambda run: run["name"])
            # One write: a result, a message the server cannot read, another result.
            for text in (json.dumps(_result(first)), "{not json", json.dumps(_result(second))):
                ws.protocol.send_text(text.encode())
            ws.transport.write(b"".join(ws.protocol.data_to_send()))
            error = await receive_until(ws, lambda m: m["type"] == "error")
            assert error["code"] == "bad_message"
            detail = await wait_until(
                lambda: _ended(client, task_id), what="the task to complete")
            assert detail["status"] == "completed"
        await client.aclose()
    assert seen.order == [first["attempt_id"], "error", second["attempt_id"]]
    assert first["attempt_id"] in seen.taken  # read in `data_received`, not by the reader
    (raw,) = seen.raws
    assert type(raw) is WebSocketsSansIOProtocol
    # Once the socket has ended, its messages would go to its queue again.
    assert raw.send_receive_event_to_app.__func__ is (
        WebSocketsSansIOProtocol.send_receive_event_to_app)


def test_a_protocol_without_uvicorns_fields_is_left_alone() -> None:
    class Other:
        def send_receive_event_to_app(self) -> None: ...

    other = Other()
    assert direct.take_texts(other, lambda text: True) is None
    assert "send_receive_event_to_app" not in vars(other)
    assert direct.take_texts(object(), lambda text: True) is None


async def _ended(client: Any, task_id: str) -> dict[str, Any] | None:
    detail = await task_detail(client, task_id)
    return detail if detail["status"] in ("completed", "failed") else None
