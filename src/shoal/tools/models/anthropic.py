"""Anthropic Messages through the official `anthropic` SDK (streaming, tool use)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import anthropic

from shoal.protocol import Usage
from shoal.tools.models.base import (
    ModelAnswer,
    ModelCall,
    ModelError,
    ToolDef,
    Turn,
    status_error,
)

MAX_TOKENS = 8192


class AnthropicClient:
    """Streams Messages with tools; the SDK's own retries are off."""

    provider = "anthropic"

    def __init__(self, *, base_url: str | None, api_key: str, model: str,
                 request_timeout: float = 600.0, max_tokens: int = MAX_TOKENS) -> None:
        self.model = model
        self.endpoint = base_url or "https://api.anthropic.com"
        self._timeout = request_timeout
        self._max_tokens = max_tokens
        self._client = anthropic.AsyncAnthropic(
            base_url=base_url, api_key=api_key, max_retries=0, timeout=request_timeout)

    async def aclose(self) -> None:
        await self._client.close()

    async def complete(self, system: str, turns: list[Turn], tools: list[ToolDef],
                       on_text: Callable[[str], None]) -> ModelAnswer:
        wire_tools: Any = [{"name": t.name, "description": t.description,
                            "input_schema": t.parameters} for t in tools]
        try:
            async with self._client.messages.stream(
                model=self.model, max_tokens=self._max_tokens, system=system,
                messages=_messages(turns), tools=wire_tools,
            ) as stream:
                async for text in stream.text_stream:
                    on_text(text)
                final = await stream.get_final_message()
        except anthropic.AnthropicError as exc:
            raise self._error(exc) from exc
        text = "".join(b.text for b in final.content if b.type == "text")
        calls = tuple(ModelCall(b.id, b.name, json.dumps(b.input))
                      for b in final.content if b.type == "tool_use")
        usage = Usage(input_tokens=final.usage.input_tokens,
                      output_tokens=final.usage.output_tokens)
        return ModelAnswer(text, calls, usage)

    def _error(self, exc: anthropic.AnthropicError) -> ModelError:
        server = f"The Anthropic API at {self.endpoint}"
        if isinstance(exc, anthropic.APITimeoutError):
            return ModelError(f"{server} did not answer within {self._timeout:g} s.",
                              retryable=True)
        if isinstance(exc, anthropic.APIConnectionError):
            cause = f" ({exc.__cause__})" if exc.__cause__ else ""
            return ModelError(f"{server} cannot be reached{cause}.", retryable=True)
        if isinstance(exc, anthropic.APIStatusError):
            body = exc.body
            said = exc.message
            if isinstance(body, dict) and isinstance(body.get("error"), dict):
                said = str(body["error"].get("message", said))
            return status_error(self.endpoint, self.model, exc.status_code, said,
                                exc.response.headers, "ANTHROPIC_API_KEY")
        return ModelError(f"{server} sent an answer Shoal could not use: {exc}.",
                          retryable=True)


def _messages(turns: list[Turn]) -> list[Any]:
    """Neutral turns as Anthropic messages: consecutive tool results share one user turn."""
    messages: list[dict[str, Any]] = []
    for turn in turns:
        if turn.role == "user":
            messages.append({"role": "user", "content": turn.text})
        elif turn.role == "assistant":
            blocks: list[dict[str, Any]] = []
            if turn.text:
                blocks.append({"type": "text", "text": turn.text})
            blocks.extend({"type": "tool_use", "id": c.id, "name": c.name,
                           "input": c.arguments_dict()} for c in turn.calls)
            messages.append({"role": "assistant", "content": blocks or [
                {"type": "text", "text": "(no answer)"}]})
        else:
            block = {"type": "tool_result", "tool_use_id": turn.call_id, "content": turn.text}
            last = messages[-1] if messages else None
            if (last is not None and last["role"] == "user"
                    and isinstance(last["content"], list)):
                last["content"].append(block)
            else:
                messages.append({"role": "user", "content": [block]})
    return messages
