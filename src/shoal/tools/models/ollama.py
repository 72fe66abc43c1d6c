"""Ollama's native `/api/chat` through the official `ollama` client (streaming, tools)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import ollama

from shoal.protocol import Usage
from shoal.tools.models.base import (
    ModelAnswer,
    ModelCall,
    ModelError,
    ToolDef,
    Turn,
    status_error,
)


class OllamaClient:
    """Streams `/api/chat` with tools. Ollama's calls carry no ids, so Shoal numbers them."""

    provider = "ollama"

    def __init__(self, *, host: str, model: str, request_timeout: float = 600.0) -> None:
        self.model = model
        self.endpoint = host
        self._timeout = request_timeout
        self._client = ollama.AsyncClient(host=host, timeout=request_timeout)
        self._calls = 0

    async def aclose(self) -> None:
        await self._client._client.aclose()

    async def complete(self, system: str, turns: list[Turn], tools: list[ToolDef],
                       on_text: Callable[[str], None]) -> ModelAnswer:
        messages: list[Any] = [{"role": "system", "content": system}]
        messages.extend(_message(t) for t in turns)
        wire_tools: Any = [{"type": "function", "function": {
            "name": t.name, "description": t.description, "parameters": t.parameters}}
            for t in tools]
        text: list[str] = []
        calls: list[ModelCall] = []
        usage = Usage()
        try:
            stream = await self._client.chat(model=self.model, messages=messages,
                                             tools=wire_tools, stream=True)
            async for part in stream:
                if part.message.content:
                    text.append(part.message.content)
                    on_text(part.message.content)
                for call in part.message.tool_calls or []:
                    self._calls += 1
                    calls.append(ModelCall(f"call_{self._calls}", call.function.name,
                                           json.dumps(dict(call.function.arguments))))
                if part.done:
                    usage = Usage(input_tokens=part.prompt_eval_count or 0,
                                  output_tokens=part.eval_count or 0)
        except ollama.ResponseError as exc:
            raise status_error(self.endpoint, self.model, exc.status_code, exc.error, None,
                               "OLLAMA_HOST") from exc
        except httpx.TimeoutException as exc:
            raise ModelError(f"Ollama at {self.endpoint} did not answer within "
                             f"{self._timeout:g} s.", retryable=True) from exc
        except (httpx.HTTPError, ConnectionError) as exc:
            raise ModelError(f"Ollama at {self.endpoint} cannot be reached ({exc}). Start it "
                             "(`ollama serve`) or set OLLAMA_HOST.", retryable=True) from exc
        except ValueError as exc:
            raise ModelError(f"Ollama at {self.endpoint} sent an answer Shoal could not use: "
                             f"{exc}.", retryable=True) from exc
        return ModelAnswer("".join(text), tuple(calls), usage)


def _message(turn: Turn) -> dict[str, Any]:
    if turn.role == "user":
        return {"role": "user", "content": turn.text}
    if turn.role == "tool":
        return {"role": "tool", "content": turn.text, "tool_name": turn.name}
    message: dict[str, Any] = {"role": "assistant", "content": turn.text}
    if turn.calls:
        message["tool_calls"] = [{"function": {"name": c.name,
                                               "arguments": c.arguments_dict()}}
                                 for c in turn.calls]
    return message
