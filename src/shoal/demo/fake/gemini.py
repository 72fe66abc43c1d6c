"""The Gemini API (`…/models/{model}:generateContent`, `:streamGenerateContent`, listing).

Served under both `/v1beta` (what Gemini CLI's bundled SDK calls) and `/v1` (what the Python
`google-genai` 3.x SDK calls). Streams are `text/event-stream` with `alt=sse` (each event
`data: <json>\\r\\n\\r\\n`) or, without `alt`, one JSON array written piece by piece.

Decoding: `contents` (role `user`/`model`; parts `text`, `functionCall`, `functionResponse`,
which becomes a neutral tool message; a user turn made only of function responses is not user
text, and Gemini CLI's `<session_context>` preamble part counts as system text),
`systemInstruction`, and `tools[].functionDeclarations` (parameters from `parameters` or
`parametersJsonSchema`). A request with `generationConfig.responseJsonSchema` (or
`responseSchema`) — Gemini CLI's router and other side calls — gets a JSON object that fills
the schema with minimal valid values instead of the script's answer.

The key arrives as the `x-goog-api-key` header or the `key` query parameter; a request without
one gets Google's 403, as the real API answers. Errors have Google's shape
(`{"error": {"code", "message", "status"}}`), with `Retry-After` and a `RetryInfo` detail when
the fault has a delay.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Match, Route
from starlette.types import Scope

from shoal.demo.fake.exchange import DEMO_MODEL, answer, client_left_during, next_id, record
from shoal.demo.fake.wire import (
    Conversation,
    Message,
    Reply,
    ToolCall,
    ToolSpec,
    paced,
    pieces,
    schema_parameters,
    usage_counts,
)

API = "gemini"
_VERSIONS = ("v1beta", "v1")
_STATUSES = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED",
             404: "NOT_FOUND", 409: "ABORTED", 429: "RESOURCE_EXHAUSTED", 499: "CANCELLED",
             500: "INTERNAL", 501: "NOT_IMPLEMENTED", 503: "UNAVAILABLE",
             504: "DEADLINE_EXCEEDED"}
_STALL_LIMIT = 3600.0  # a non-streaming stall waits this long for the client to leave
_SSE_END = "\r\n\r\n"
_CONTEXT = "<session_context>"
_UNTRUSTED = re.compile(r"</?untrusted_context>\n?")


def routes() -> list[BaseRoute]:
    found: list[BaseRoute] = []
    for version in _VERSIONS:
        found += [
            Route(f"/{version}/models/{{target}}", _model_call, methods=["POST"]),
            _GoogleRoute(f"/{version}/models/{{model}}", _model, methods=["GET"]),
            _GoogleRoute(f"/{version}/models", _models, methods=["GET"]),
        ]
    return found


class _GoogleRoute(Route):
    """A route that only takes requests carrying a Google API key.

    `GET /v1/models` is also OpenAI's model listing; a request with `x-goog-api-key` (or
    `?key=`) is Google's, anything else is left to the next route.
    """

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        match, child = super().matches(scope)
        if match is Match.NONE or _scope_has_key(scope):
            return match, child
        return Match.NONE, {}


def _scope_has_key(scope: Scope) -> bool:
    headers = dict(scope.get("headers") or [])
    query = scope.get("query_string", b"")
    return b"x-goog-api-key" in headers or any(
        part.startswith(b"key=") for part in query.split(b"&"))


def _api_key(request: Request) -> str:
    return request.headers.get("x-goog-api-key") or request.query_params.get("key") or ""


# ---- decoding ---------------------------------------------------------------------------


def decode(body: Mapping[str, Any], model: str, *, stream: bool) -> Conversation:
    """A generateContent request as a neutral conversation."""
    messages: list[Message] = []
    system = _parts_text(_parts(_either(body, "systemInstruction", "system_instruction")))
    if system:
        messages.append(Message("system", system))
    for content in body.get("contents") or []:
        if isinstance(content, Mapping):
            messages.extend(_decode_content(content))
    return Conversation(API, model, tuple(messages), _tools(body.get("tools")), stream)


def _decode_content(content: Mapping[str, Any]) -> list[Message]:
    parts = _parts(content)
    text = _parts_text(parts)
    if content.get("role") == "model":
        calls = tuple(ToolCall(str(c.get("name", "")), _object(c.get("args")), str(c.get("id", "")))
                      for p in parts if isinstance(c := p.get("functionCall"), Mapping))
        return [Message("assistant", text, calls)]
    decoded = [Message("tool", _response_text(r.get("response")))
               for p in parts if isinstance(r := p.get("functionResponse"), Mapping)]
    context = [p for p in parts if str(p.get("text", "")).startswith(_CONTEXT)]
    if context:  # Gemini CLI's environment preamble: context, not the user's words
        decoded.append(Message("system", _parts_text(context)))
        text = _parts_text([p for p in parts if p not in context])
    if text:
        decoded.append(Message("user", text))
    return decoded


def _parts(content: Any) -> list[Mapping[str, Any]]:
    if isinstance(content, str):
        return [{"text": content}]
    if isinstance(content, Mapping):
        content = content.get("parts")
    if isinstance(content, list):
        return [p for p in content if isinstance(p, Mapping)]
    return []


def _parts_text(parts: list[Mapping[str, Any]]) -> str:
    """The text of the parts, one per line; the model's own thoughts left out."""
    return "\n".join(str(p["text"]) for p in parts
                     if isinstance(p.get("text"), str) and p["text"] and not p.get("thought"))


def _response_text(response: Any) -> str:
    if not isinstance(response, Mapping):
        return json.dumps(response)
    if "output" in response:  # Gemini CLI wraps command output in <untrusted_context> tags
        return _UNTRUSTED.sub("", str(response["output"])).strip()
    if "error" in response:
        error = str(response["error"])
        return error if error.startswith("Error") else f"Error: {error}"
    return json.dumps(response)


def _object(raw: Any) -> dict[str, Any]:
    return dict(raw) if isinstance(raw, Mapping) else {}


def _tools(raw: Any) -> tuple[ToolSpec, ...]:
    specs: list[ToolSpec] = []
    for tool in raw if isinstance(raw, list) else []:
        declarations = _either(tool, "functionDeclarations", "function_declarations")
        for d in declarations if isinstance(declarations, list) else []:
            if isinstance(d, Mapping):
                schema = _either(d, "parametersJsonSchema", "parameters_json_schema",
                                 "parameters")
                specs.append(ToolSpec(str(d.get("name", "")), schema_parameters(schema)))
    return tuple(specs)


def _either(raw: Any, *keys: str) -> Any:
    """The first of `keys` set in `raw` (google-genai sends some fields in snake_case)."""
    if isinstance(raw, Mapping):
        for key in keys:
            if raw.get(key) is not None:
                return raw[key]
    return None


def response_schema(body: Mapping[str, Any]) -> Any:
    """The JSON schema a request asks the answer to follow, or None."""
    config = _either(body, "generationConfig", "generation_config")
    return _either(config, "responseJsonSchema", "response_json_schema", "responseSchema",
                   "response_schema")


def fill_schema(schema: Any) -> Any:
    """A minimal value that satisfies `schema` (JSON Schema or Gemini's OpenAPI subset)."""
    if not isinstance(schema, Mapping):
        return None
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    for key in ("anyOf", "oneOf", "allOf"):
        if isinstance(schema.get(key), list) and schema[key]:
            return fill_schema(schema[key][0])
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if str(k).lower() != "null"), "null")
    kind = str(kind or ("object" if "properties" in schema else "null")).lower()
    if kind == "object":
        props = schema.get("properties")
        return {str(k): fill_schema(v) for k, v in props.items()} if isinstance(
            props, Mapping) else {}
    if kind == "array":
        return [fill_schema(schema.get("items"))
                for _ in range(int(schema.get("minItems") or 0))]
    if kind == "string":
        return "x" * int(schema.get("minLength") or 0)
    if kind in ("integer", "number"):
        return _minimal_number(schema, integer=kind == "integer")
    return False if kind == "boolean" else None


def _minimal_number(schema: Mapping[str, Any], *, integer: bool) -> int | float:
    low = schema.get("minimum", schema.get("exclusiveMinimum"))
    if not isinstance(low, int | float):
        return 0
    value = low + (1 if "minimum" not in schema else 0)
    return int(value) if integer else value


# ---- routes -----------------------------------------------------------------------------


async def _models(request: Request) -> Response:

    record(request, "gemini_models")
    return JSONResponse({"models": [_model_info("")]})


async def _model(request: Request) -> Response:

    record(request, "gemini_models")
    return JSONResponse(_model_info(request.path_params["model"]))


def _model_info(name: str) -> dict[str, Any]:

    model = name or DEMO_MODEL
    return {"name": f"models/{model}", "baseModelId": model, "version": "1",
            "displayName": f"{model} (Shoal demo model)",
            "description": "Scripted answers from Shoal's demo model, not a real model.",
            "inputTokenLimit": 1_048_576, "outputTokenLimit": 65_536,
            "supportedGenerationMethods": ["generateContent", "streamGenerateContent",
                                           "countTokens"]}


async def _model_call(request: Request) -> Response:
    model, _, method = request.path_params["target"].rpartition(":")
    if method not in ("generateContent", "streamGenerateContent", "countTokens"):
        return error(404, f"Method {method!r} is not served by the demo model. Use "
                     "generateContent, streamGenerateContent or countTokens.")
    if not _api_key(request):
        return error(403, "Method doesn't allow unregistered callers (callers without "
                     "established identity). Please use API Key or other form of API consumer "
                     "identity to call this API.")
    try:
        body = await request.json()
    except ValueError:
        return error(400, "The request body is not JSON. Send a generateContent request.")
    if not isinstance(body, dict) or not isinstance(body.get("contents", []), list):
        return error(400, "`contents` must be a list of {role, parts} objects.")
    conversation = decode(body, model, stream=method == "streamGenerateContent")
    if method == "countTokens":

        record(request, "gemini_count_tokens", body)
        return JSONResponse({"totalTokens": usage_counts(conversation, Reply())[0]})
    return await _generate(request, conversation, body)


async def _generate(request: Request, conversation: Conversation,
                    body: dict[str, Any]) -> Response:

    reply = await answer(request, conversation, body)
    if reply is None:
        return Response(status_code=499)  # nobody is listening any more
    schema = response_schema(body)
    if schema is not None:  # a side call: answer in the shape asked for, not the script's
        reply = dataclasses.replace(reply, text=json.dumps(fill_schema(schema)), tool_calls=())
    fault = reply.fault
    if fault is not None and fault.kind == "status":
        return error(fault.status, fault.message, retry_after=fault.retry_after)
    if fault is not None and not conversation.stream:
        if fault.kind == "malformed":
            return Response('{"candidates": [{"content": ', media_type="application/json")
        await client_left_during(request, _STALL_LIMIT)
        return Response(status_code=499)
    number = next_id(request)
    chunks = _chunks(reply, conversation, number)
    if not conversation.stream:
        return JSONResponse(_merge(list(chunks)))
    if request.query_params.get("alt") == "sse":
        events = _sse_events(reply, chunks)
        return StreamingResponse(paced(events, reply), media_type="text/event-stream")
    return StreamingResponse(paced(_array_events(reply, chunks), reply),
                             media_type="application/json")


def error(status: int, message: str, *, retry_after: float | None = None) -> Response:
    """A Google-style error body; with `retry_after`, a `Retry-After` header and `RetryInfo`."""
    body: dict[str, Any] = {"code": status, "message": message,
                            "status": _STATUSES.get(status, "UNKNOWN")}
    headers: dict[str, str] = {}
    if retry_after is not None:
        headers["retry-after"] = f"{retry_after:g}"
        body["details"] = [{"@type": "type.googleapis.com/google.rpc.RetryInfo",
                            "retryDelay": f"{retry_after:g}s"}]
    return JSONResponse({"error": body}, status_code=status, headers=headers)


# ---- encoding ---------------------------------------------------------------------------


def _chunks(reply: Reply, conversation: Conversation, number: int) -> Iterator[dict[str, Any]]:
    """The answer as stream chunks; the last carries the finish reason and the usage."""

    groups: list[list[dict[str, Any]]] = [[{"text": piece}] for piece in pieces(reply.text)]
    calls = [{"functionCall": {"id": c.id or f"call_demo_{number}_{i}", "name": c.name,
                               "args": c.arguments}} for i, c in enumerate(reply.tool_calls)]
    if calls:
        groups.append(calls)
    groups = groups or [[{"text": ""}]]
    prompt, answer = usage_counts(conversation, reply)
    for index, parts in enumerate(groups):
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
        chunk: dict[str, Any] = {"candidates": [candidate],
                                 "modelVersion": conversation.model or DEMO_MODEL,
                                 "responseId": f"demo-{number}"}
        if index == len(groups) - 1:
            candidate["finishReason"] = "STOP"
            chunk["usageMetadata"] = {"promptTokenCount": prompt,
                                      "candidatesTokenCount": answer,
                                      "totalTokenCount": prompt + answer}
        yield chunk


def _merge(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """One response holding every chunk's parts (text pieces joined back together)."""
    parts: list[dict[str, Any]] = []
    for chunk in chunks:
        for part in chunk["candidates"][0]["content"]["parts"]:
            if "text" in part and parts and "text" in parts[-1]:
                parts[-1] = {"text": parts[-1]["text"] + part["text"]}
            else:
                parts.append(part)
    last = chunks[-1]
    candidate = {**last["candidates"][0], "content": {"role": "model", "parts": parts}}
    return {**last, "candidates": [candidate]}


def _opening(reply: Reply, chunks: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """For a stall, an empty first chunk, so the client is left waiting for the rest."""
    if reply.fault is not None and reply.fault.kind == "stall":
        yield {"candidates": [{"content": {"role": "model", "parts": [{"text": ""}]},
                               "index": 0}]}
    yield from chunks


def _sse_events(reply: Reply, chunks: Iterator[dict[str, Any]]) -> Iterator[str]:
    malformed = reply.fault is not None and reply.fault.kind == "malformed"
    for chunk in _opening(reply, chunks):
        yield f"data: {json.dumps(chunk)}{_SSE_END}"
        if malformed:
            yield f'data: {{"candidates": [{{"content": {_SSE_END}'
            return


def _array_events(reply: Reply, chunks: Iterator[dict[str, Any]]) -> Iterator[str]:
    malformed = reply.fault is not None and reply.fault.kind == "malformed"
    for index, chunk in enumerate(_opening(reply, chunks)):
        yield ("[" if index == 0 else ",\r\n") + json.dumps(chunk)
        if malformed:
            yield ',\r\n{"candidates": [{"content": '
            return
    yield "]"
