"""An attempt's streamed model text, coalesced on its way to the control plane."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

from shoal.worker.logstream import Outgoing

TOKEN_INTERVAL = 0.05  # seconds: at most one `agent_tokens` message per interval
MAX_TOKEN_MESSAGE = 16_000  # characters per message (the protocol's limit)
MAX_BUFFERED = 64_000  # characters held while the socket is slow; older text is dropped


class TokenStream(Outgoing):
    """The tool calls `write` with each piece of text as the model streams it; `chunks()`
    yields what piled up, then pauses `interval` before the next, so a model streaming word
    by word costs at most one message per interval. Text past `MAX_BUFFERED` is dropped from
    the front: it is live only, and the attempt's log lines keep all of it."""

    def __init__(self, interval: float = TOKEN_INTERVAL,
                 pause: Callable[[float], Awaitable[object]] = asyncio.sleep) -> None:
        super().__init__()
        self._interval = interval
        self._pause = pause
        self._text = ""

    def _waiting(self) -> bool:
        return bool(self._text)

    def write(self, text: str) -> None:
        """Queue streamed text; never blocks."""
        if self._closed or not text:
            return
        self._text = (self._text + text)[-MAX_BUFFERED:]
        self._written()

    async def chunks(self) -> AsyncIterator[str]:
        """What piled up since the last chunk, at most one chunk per interval."""
        ready = self._event()
        while True:
            await ready.wait()
            ready.clear()
            while self._text:
                chunk, self._text = (self._text[:MAX_TOKEN_MESSAGE],
                                     self._text[MAX_TOKEN_MESSAGE:])
                yield chunk
                if not self._closed:
                    await self._pause(self._interval)
            if self._closed:
                return
