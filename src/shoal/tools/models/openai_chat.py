"""OpenAI Chat Completions through the official `openai` SDK: OpenAI itself and every
OpenAI-compatible server (vLLM, LM Studio, llama.cpp server, Ollama's `/v1`, the demo model).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import openai
from openai.types.chat import ChatCompletionMessageParam
from openai.types.chat.chat_completion_chunk import ChoiceDeltaToolCall

from shoal.protocol import Usage
from shoal.tools.models.base import (
    ModelAnswer,
    ModelCall,
    ModelError,
    ToolDef,
    Turn,
    status_error,
)


@dataclass
class _Call:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class OpenAIChatClient:
    """Streams Chat Completions with tool calls; the SDK's own retries are off."""

    def __init__(self, *, base_url: str | None, api_key: str, model: str,
                 provider: str = "openai", key_hint: str = "OPENAI_API_KEY",
                 request_timeout: float = 600.0) -> None:
        self.provider = provider
        self.model = model
        self.endpoint = base_url or "https://api.openai.com/v1"
        self._key_hint = key_hint
        self._timeout = request_timeout
        self._client = openai.AsyncOpenAI(
            base_url=base_url, api_key=api_key or "none", max_retries=0,
            timeout=request_timeout)

    async def aclose(self) -> None:
        await self._client.close()

    async def complete(self, system: str, turns: list[Turn], tools: list[ToolDef],
                       on_text: Callable[[str], None]) -> ModelAnswer:
        messages: list[ChatCompletionMessageParam] = [{"role": "system", "content": system}]
        messages.extend(_message(t) for t in turns)
        wire_tools: Any = [{"type": "function", "function": {
            "name": t.name, "description": t.description, "parameters": t.parameters}}
            for t in tools]
        text: list[str] = []
        calls: dict[int, _Call] = {}
        usage = Usage()
        try:
            stream = await self._client.chat.completions.create(
                model=self.model, messages=messages, tools=wire_tools, stream=True,
                stream_options={"include_usage": True})
            async with stream:
                async for chunk in stream:
                    if chunk.usage is not None:
                        usage = Usage(input_tokens=chunk.usage.prompt_tokens or 0,
                                      output_tokens=chunk.usage.completion_tokens or 0)
                    for choice in chunk.choices:
                        if choice.delta.content:
                            text.append(choice.delta.content)
                            on_text(choice.delta.content)
                        _absorb(calls, choice.delta.tool_calls or [])
        except openai.OpenAIError as exc:
            raise self._error(exc) from exc
        ordered = [calls[i] for i in sorted(calls)]
        return ModelAnswer("".join(text), tuple(
            ModelCall(c.id, c.name, "".join(c.arguments)) for c in ordered), usage)

    def _error(self, exc: openai.OpenAIError) -> ModelError:
        server = f"The model server at {self.endpoint}"
        if isinstance(exc, openai.APITimeoutError):
            return ModelError(f"{server} did not answer within {self._timeout:g} s.",
                              retryable=True)
        if isinstance(exc, openai.APIConnectionError):
            cause = f" ({exc.__cause__})" if exc.__cause__ else ""
            return ModelError(f"{server} cannot be reached{cause}. Start that server (the "
                              "bundled demo: `shoal demo-model`) or point the base URL at one "
                              "that runs.", retryable=True)
        if isinstance(exc, openai.APIStatusError):
            body = exc.body
            said = (str(body["message"]) if isinstance(body, dict)
                    and isinstance(body.get("message"), str) else exc.message)
            return status_error(self.endpoint, self.model, exc.status_code, said,
                                exc.response.headers, self._key_hint)
        return ModelError(f"{server} sent an answer Shoal could not use: {exc}. Check that it "
                          "speaks the OpenAI Chat Completions protocol with streaming.",
                          retryable=True)


def _message(turn: Turn) -> ChatCompletionMessageParam:
    if turn.role == "user":
        return {"role": "user", "content": turn.text}
    if turn.role == "tool":
        return {"role": "tool", "tool_call_id": turn.call_id, "content": turn.text}
    message: Any = {"role": "assistant", "content": turn.text or None}
    if turn.calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function",
             "function": {"name": c.name, "arguments": c.arguments or "{}"}}
            for c in turn.calls]
    result: ChatCompletionMessageParam = message
    return result


def _absorb(calls: dict[int, _Call], deltas: list[ChoiceDeltaToolCall]) -> None:
    """Merge streamed tool-call pieces: the id and name come once, arguments in parts."""
    for delta in deltas:
        call = calls.setdefault(delta.index, _Call())
        if delta.id and not call.id:
            call.id = delta.id
        if delta.function is None:
            continue
        if delta.function.name and not call.name:
            call.name = delta.function.name
        if delta.function.arguments:
            call.arguments.append(delta.function.arguments)
