"""An attempt's log lines, buffered and coalesced on their way to the control plane."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Callable

LOG_BUFFER_LINES = 1000  # per attempt; beyond this, lines are counted and dropped
MAX_LOG_LINE = 8000  # characters; longer lines are clipped
MAX_LOG_MESSAGE = 64_000  # characters per `agent_log` (the protocol's limit)


class Outgoing:
    """What an attempt sends as it runs, buffered: `write` wakes a forwarder, started with the
    first write (`start_with`), which reads until `close`. Subclasses keep the buffer."""

    def __init__(self) -> None:
        self._closed = False
        self._ready: asyncio.Event | None = None  # made for the first reader (`_event`)
        self._starter: Callable[[], object] | None = None

    def _waiting(self) -> bool:
        """Whether something is buffered."""
        raise NotImplementedError

    def start_with(self, starter: Callable[[], object]) -> None:
        """Call `starter` (which begins forwarding) now if something waits, else on the first
        `write`: an attempt that sends nothing costs no forwarding task."""
        if self._waiting():
            starter()
        else:
            self._starter = starter

    def _event(self) -> asyncio.Event:
        """What a reader waits on, made when the first one comes (set if something waits or
        the stream is closed): most attempts send nothing, and need none."""
        if self._ready is None:
            self._ready = asyncio.Event()
            if self._closed or self._waiting():
                self._ready.set()
        return self._ready

    def _written(self) -> None:
        if self._ready is not None:
            self._ready.set()
        if self._starter is not None:
            starter, self._starter = self._starter, None
            starter()

    def close(self) -> None:
        """Nothing more will come; reading ends once the buffer is empty."""
        self._closed = True
        self._starter = None
        if self._ready is not None:
            self._ready.set()


class LogStream(Outgoing):
    """One attempt's log lines on their way to the control plane, in a bounded buffer.

    The tool calls `write` (from the event loop's thread); a forwarder, started with the first
    line (`start_with`), iterates `batches()`, which joins whatever piled up into as few
    `agent_log` messages as fit, so a flood of lines costs few messages. Past `limit` buffered
    lines, new lines are counted and reported as dropped instead of growing memory.
    """

    def __init__(self, limit: int = LOG_BUFFER_LINES) -> None:
        super().__init__()
        self._lines: deque[str] = deque()
        self._limit = limit
        self._dropped = 0

    def _waiting(self) -> bool:
        return bool(self._lines or self._dropped)

    def write(self, line: str) -> None:
        """Queue one line (clipped if very long); never blocks."""
        if self._closed:
            return
        if len(self._lines) >= self._limit:
            self._dropped += 1
        else:
            clipped = line if len(line) <= MAX_LOG_LINE else line[:MAX_LOG_LINE] + " …[clipped]"
            self._lines.append(clipped)
        self._written()

    async def batches(self) -> AsyncIterator[str]:
        """Coalesced chunks of text, each small enough for one `agent_log` message."""
        ready = self._event()
        while True:
            await ready.wait()
            ready.clear()
            while chunk := self._take():
                yield chunk
            if self._closed:
                return

    def _take(self) -> str:
        parts: list[str] = []
        if self._dropped:
            parts.append(f"[shoal] {self._dropped} log lines dropped: the tool wrote faster "
                         "than they could be sent")
            self._dropped = 0
        size = sum(len(p) + 1 for p in parts)
        while self._lines and size + len(self._lines[0]) + 1 <= MAX_LOG_MESSAGE:
            line = self._lines.popleft()
            parts.append(line)
            size += len(line) + 1
        return "\n".join(parts)
