"""The server's own side of a WebSocket, under Starlette's: what a writer that must not suspend
reads and writes through (a lane of client WebSockets, `api/fanout.py`, and a worker socket's
writer, `api/worker_ws.py`; ADRs 0042, 0045, 0046).

Under uvicorn's sans-I/O protocol over `websockets`' `ServerProtocol`, a text frame can be made
once as its bytes on the wire (`wire`) and written to the socket's transport, after the checks
uvicorn's own `send` makes, read as attributes. Anywhere else (another server, a test client)
`direct_of` finds nothing and the socket is written through Starlette, as before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from starlette.websockets import WebSocketDisconnect
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.frames import Frame, Opcode
from websockets.protocol import OPEN
from websockets.server import ServerProtocol

if TYPE_CHECKING:
    from starlette.websockets import WebSocket

# For each socket of a burst a lane asks whether its lock is held and its transport writable.
# It reads the fields `Lock.locked()` and `Event.is_set()` return, not the methods: they were
# the two Python calls a delivery that were left (issue 37's eleventh round). An asyncio that
# keeps them elsewhere lets no socket take a lane (`direct_of`).
FIELDS = hasattr(asyncio.Lock(), "_locked") and hasattr(asyncio.Event(), "_value")
Send = Callable[[dict[str, Any]], Coroutine[Any, Any, None]]  # an ASGI server's `send`


@dataclass(frozen=True, slots=True)
class Direct:
    """The server's own side of a socket, under Starlette's: the event uvicorn's WebSocket
    protocol clears while its transport is paused, the protocol's ASGI `send`, and the
    protocol itself when it is uvicorn's sans-I/O one (`raw`).

    While `writable` is set, `send` writes a frame without suspending, so a lane can write to
    many sockets in turn without one of them holding the others up. A lane writes through
    `send` itself, not through Starlette's `send_text`, its `send` and its exception handler's
    wrapper. Through `raw` it goes further: a burst's frame is made once, as the bytes it is on
    the wire, and written to each socket's transport as they are (`Lane._send`), where `send`
    would encode the text and build the same frame again for every socket (benchmarks/README.md,
    issue 37's tenth round)."""

    writable: asyncio.Event
    send: Send
    raw: Any = None  # uvicorn's `WebSocketsSansIOProtocol`, checked by `raw_protocol`


def direct_of(ws: WebSocket) -> Direct | None:
    """`ws`'s `Direct`, found from its ASGI `send` (a bound method of the protocol, under
    Starlette's wrappers that close over the `send` they were given); None if there is none
    (another server, a test client): such a socket never takes the fast lane, and is written
    through Starlette."""
    send: Any = ws._send
    for _ in range(8 if FIELDS else 0):
        protocol = getattr(send, "__self__", None)
        event = getattr(protocol, "writable", None)
        if type(event) is asyncio.Event:
            return Direct(event, send, raw_protocol(protocol))
        code, cells = getattr(send, "__code__", None), getattr(send, "__closure__", None)
        if code is None or not cells or "send" not in code.co_freevars:
            return None
        send = cells[code.co_freevars.index("send")].cell_contents
    return None


def raw_protocol(protocol: Any) -> Any:
    """`protocol` if a lane may write a frame's bytes to its transport itself: uvicorn's
    sans-I/O protocol over `websockets`' `ServerProtocol`, with the fields its own `send`
    checks and writes through (else None, and the lane uses `send`)."""
    if type(protocol) is not WebSocketsSansIOProtocol:
        return None
    conn = getattr(protocol, "conn", None)
    if not isinstance(conn, ServerProtocol) or not all(
            hasattr(protocol, name) for name in ("transport", "close_sent", "disconnected")):
        return None
    return protocol if hasattr(conn, "_state") and hasattr(conn, "extensions") else None


def wire(text: str) -> bytes:
    """A text frame of `text` as a server sends it: unmasked, in one piece, no extension (what
    `ServerProtocol.send_text` writes for a socket that agreed to none)."""
    return Frame(Opcode.TEXT, text.encode()).serialize(mask=False)


def plain_open(raw: Any) -> bool:
    """Whether a text frame may go to `raw`'s socket (a `Direct.raw`) as `wire` bytes written
    to its transport now: what uvicorn's `send` would check (its transport not paused, the
    socket open, no close sent, not disconnected), and no extension agreed (compression would
    change the bytes). A lane makes the same checks inline, with no call (`Lane._send`)."""
    conn = raw.conn
    return bool(raw.writable._value and conn._state is OPEN and not conn.extensions
                and not raw.close_sent and not raw.disconnected)


def take_texts(raw: Any, take: Callable[[str], bool]) -> Callable[[], None] | None:
    """From now on, a whole text message that reaches `raw`'s socket (a `Direct.raw`) while
    nothing waits in its ASGI queue goes to `take` in the protocol's own `data_received`,
    rather than through the queue to the endpoint's reader: no turn of the event loop, no
    pause and resume of the socket's reading (uvicorn pauses it at each message it queues),
    no Starlette `receive` (issue 37's twenty-first round). `take(text)` returns False for a
    message it leaves to the reader (one it cannot read, which the reader answers), and that
    message is queued as any other; so is every message while one waits in the queue, so that
    none overtakes another. Returns what undoes it (the socket's messages go to the queue
    again), or None where uvicorn's protocol has not the fields this reads (nothing is done).
    """
    queued = getattr(raw, "send_receive_event_to_app", None)
    if queued is None or not all(hasattr(raw, name) for name in (
            "frames", "curr_msg_data_type", "queue", "close_sent")):
        return None

    def arrived() -> None:  # uvicorn's `send_receive_event_to_app`, for this socket
        frames = raw.frames
        if (len(frames) == 1 and raw.curr_msg_data_type == "text" and not raw.close_sent
                and raw.queue.empty()):
            try:
                text = frames[0].decode()
            except UnicodeDecodeError:  # uvicorn closes the socket with 1007
                queued()
                return
            if take(text):
                raw.frames = []
                return
        queued()

    raw.send_receive_event_to_app = arrived

    def undo() -> None:
        raw.send_receive_event_to_app = queued

    return undo


def failure(exc: Exception) -> BaseException:
    """What a failed direct send means to the socket's own stream: the client left (as
    Starlette says it when its own send fails), or `exc` itself."""
    return WebSocketDisconnect(code=1006) if isinstance(exc, OSError) else exc
