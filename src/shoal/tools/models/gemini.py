"""Gemini through the official `google-genai` SDK (streaming, function calling)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
from google import genai
from google.genai import errors, types

from shoal.protocol import Usage
from shoal.tools.models.base import (
    ModelAnswer,
    ModelCall,
    ModelError,
    ToolDef,
    Turn,
    status_error,
)


class GeminiClient:
    """Streams generateContent with function declarations; no automatic function calling."""

    provider = "gemini"

    def __init__(self, *, base_url: str | None, api_key: str, model: str,
                 request_timeout: float = 600.0) -> None:
        self.model = model
        self.endpoint = base_url or "https://generativelanguage.googleapis.com"
        self._timeout = request_timeout
        options = types.HttpOptions(base_url=base_url, timeout=int(request_timeout * 1000))
        self._client = genai.Client(api_key=api_key, http_options=options)

    async def aclose(self) -> None:
        await self._client.aio.aclose()

    async def complete(self, system: str, turns: list[Turn], tools: list[ToolDef],
                       on_text: Callable[[str], None]) -> ModelAnswer:
        config = types.GenerateContentConfig(
            system_instruction=system,
            tools=[types.Tool(function_declarations=[
                types.FunctionDeclaration(name=t.name, description=t.description,
                                          parameters_json_schema=t.parameters)
                for t in tools])],
            automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
        )
        text: list[str] = []
        calls: list[ModelCall] = []
        usage = Usage()
        try:
            stream = await self._client.aio.models.generate_content_stream(
                model=self.model, contents=_contents(turns), config=config)
            async for chunk in stream:
                if chunk.usage_metadata is not None:
                    usage = Usage(
                        input_tokens=chunk.usage_metadata.prompt_token_count or 0,
                        output_tokens=chunk.usage_metadata.candidates_token_count or 0)
                for candidate in chunk.candidates or []:
                    for part in (candidate.content.parts if candidate.content else None) or []:
                        if part.text and not part.thought:
                            text.append(part.text)
                            on_text(part.text)
                        if part.function_call is not None:
                            call = part.function_call
                            calls.append(ModelCall(
                                call.id or f"call_{len(calls)}", call.name or "",
                                json.dumps(call.args or {})))
        except errors.APIError as exc:
            raise self._status(exc) from exc
        except httpx.TimeoutException as exc:
            raise ModelError(f"The Gemini API at {self.endpoint} did not answer within "
                             f"{self._timeout:g} s.", retryable=True) from exc
        except httpx.HTTPError as exc:
            raise ModelError(f"The Gemini API at {self.endpoint} cannot be reached ({exc}).",
                             retryable=True) from exc
        except ValueError as exc:  # a body or stream event that is not JSON
            raise ModelError(f"The Gemini API at {self.endpoint} sent an answer Shoal could "
                             f"not use: {exc}.", retryable=True) from exc
        return ModelAnswer("".join(text), tuple(calls), usage)

    def _status(self, exc: errors.APIError) -> ModelError:
        response = exc.response
        headers = getattr(response, "headers", None)
        return status_error(self.endpoint, self.model, int(exc.code or 0),
                            str(exc.message or exc), headers, "GEMINI_API_KEY")


def _contents(turns: list[Turn]) -> list[Any]:
    contents: list[types.Content] = []
    for turn in turns:
        if turn.role == "user":
            contents.append(types.Content(role="user", parts=[types.Part(text=turn.text)]))
        elif turn.role == "assistant":
            parts = [types.Part(text=turn.text)] if turn.text else []
            parts.extend(types.Part(function_call=types.FunctionCall(
                id=c.id, name=c.name, args=c.arguments_dict())) for c in turn.calls)
            contents.append(types.Content(role="model", parts=parts or [types.Part(text="")]))
        else:
            part = types.Part(function_response=types.FunctionResponse(
                id=turn.call_id, name=turn.name, response={"output": turn.text}))
            last = contents[-1] if contents else None
            if (last is not None and last.role == "user" and last.parts
                    and last.parts[0].function_response is not None):
                last.parts.append(part)
            else:
                contents.append(types.Content(role="user", parts=[part]))
    return contents
