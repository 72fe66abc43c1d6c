"""Ollama's own API (`/api/chat`, `/api/generate`, `/api/tags`, `/api/show`, `/api/version`).

What the official `ollama` clients and Codex `--oss` call. `/api/chat` and `/api/generate`
stream NDJSON (one JSON object a line) unless the request says `"stream": false`; tool calls
travel whole in `message.tool_calls` with their arguments as an object, and tool results come
back as `role: "tool"` messages. `/api/generate` has no tool calls, so a reply that only calls
tools is answered with those calls as JSON text. Errors are `{"error": "…"}`. Ollama's
OpenAI-compatible `/v1/*` routes are the `openai_chat` and `openai_responses` modules.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from shoal.demo.fake.exchange import DEMO_MODEL, answer, client_left_during, record
from shoal.demo.fake.wire import (
    Conversation,
    Message,
    Reply,
    ToolCall,
    ToolSpec,
    paced,
    pieces,
    schema_parameters,
    text_of,
    usage_counts,
)

VERSION = "0.13.5"  # Codex --oss refuses an Ollama older than 0.13.4
_NDJSON = "application/x-ndjson"
_DIGEST = "0" * 64
_Lines = Callable[[Reply, dict[str, Any], dict[str, Any], bool], Iterator[dict[str, Any]]]
_DETAILS = {"parent_model": "", "format": "gguf", "family": "shoal-demo",
            "families": ["shoal-demo"], "parameter_size": "0", "quantization_level": "none"}


def routes() -> list[BaseRoute]:
    return [
        Route("/api/version", _version, methods=["GET"]),
        Route("/api/tags", _tags, methods=["GET"]),
        Route("/api/show", _show, methods=["POST"]),
        Route("/api/pull", _pull, methods=["POST"]),
        Route("/api/chat", _chat, methods=["POST"]),
        Route("/api/generate", _generate, methods=["POST"]),
    ]


def error(status: int, message: str, *, retry_after: float | None = None) -> Response:
    """An Ollama-style error body, with `Retry-After` when the client should come back."""
    headers = {"retry-after": f"{retry_after:g}"} if retry_after is not None else None
    return JSONResponse({"error": message}, status_code=status, headers=headers)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())


# ---- model information -------------------------------------------------------------------


async def _version(request: Request) -> Response:

    record(request, "ollama_version")
    return JSONResponse({"version": VERSION})


async def _tags(request: Request) -> Response:

    record(request, "ollama_tags")
    name = f"{DEMO_MODEL}:latest"
    return JSONResponse({"models": [{"name": name, "model": name, "modified_at": _now(),
                                     "size": 0, "digest": _DIGEST, "details": _DETAILS}]})


async def _show(request: Request) -> Response:
    """Any model name is "installed": the demo model answers for all of them."""

    body = await _body(request)
    record(request, "ollama_show", body)
    return JSONResponse({
        "modelfile": "# The Shoal demo model: a script, not a real model.\n", "parameters": "",
        "template": "{{ .Prompt }}", "details": _DETAILS, "modified_at": _now(),
        "model_info": {"general.architecture": "shoal-demo", "shoal-demo.context_length": 131072},
        "capabilities": ["completion", "tools"],
    })


async def _pull(request: Request) -> Response:
    """Nothing to download: every model name is already there."""

    body = await _body(request)
    record(request, "ollama_pull", body)
    if body.get("stream", True) is False:
        return JSONResponse({"status": "success"})
    return Response(json.dumps({"status": "success"}) + "\n", media_type=_NDJSON)


async def _body(request: Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


# ---- decoding ----------------------------------------------------------------------------


def decode_chat(body: dict[str, Any]) -> Conversation:
    """An `/api/chat` request as a neutral conversation."""
    messages: list[Message] = []
    for m in body["messages"]:
        if not isinstance(m, dict):
            continue
        role, text = m.get("role"), text_of(m.get("content"))
        if role == "system":
            messages.append(Message("system", text))
        elif role == "user":
            messages.append(Message("user", text))
        elif role == "tool":
            messages.append(Message("tool", text))
        elif role == "assistant":
            calls = tuple(_call(c["function"]) for c in m.get("tool_calls") or []
                          if isinstance(c, dict) and isinstance(c.get("function"), dict))
            messages.append(Message("assistant", text, calls))
    tools = tuple(ToolSpec(str(t["function"].get("name", "")),
                           schema_parameters(t["function"].get("parameters")))
                  for t in body.get("tools") or []
                  if isinstance(t, dict) and isinstance(t.get("function"), dict))
    return Conversation("ollama_chat", str(body.get("model", "")), tuple(messages), tools,
                        body.get("stream", True) is not False)


def decode_generate(body: dict[str, Any]) -> Conversation:
    """An `/api/generate` request (a system prompt and a prompt) as a conversation."""
    messages = [Message("system", body["system"])] if isinstance(body.get("system"), str) else []
    messages.append(Message("user", str(body.get("prompt") or "")))
    return Conversation("ollama_generate", str(body.get("model", "")), tuple(messages),
                        stream=body.get("stream", True) is not False)


def _call(function: dict[str, Any]) -> ToolCall:
    raw = function.get("arguments")
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            raw = {}
    return ToolCall(str(function.get("name", "")), raw if isinstance(raw, dict) else {})


# ---- the two conversation routes ---------------------------------------------------------


async def _chat(request: Request) -> Response:
    body = await _body(request)
    if not isinstance(body.get("messages"), list):
        return error(400, "`messages` must be a list of chat messages, e.g. "
                     '[{"role": "user", "content": "Hello"}].')
    return await _respond(request, body, decode_chat(body), _chat_lines)


async def _generate(request: Request) -> Response:

    body = await _body(request)
    if not body.get("model"):
        return error(400, "`model` is required, e.g. \"shoal-demo\".")
    if not body.get("prompt"):  # Ollama's way to (pre)load a model: nothing to answer
        record(request, "ollama_generate", body)
        return JSONResponse({"model": body["model"], "created_at": _now(), "response": "",
                             "done": True, "done_reason": "load"})
    return await _respond(request, body, decode_generate(body), _generate_lines)


async def _respond(request: Request, body: dict[str, Any], conversation: Conversation,
                   lines: _Lines) -> Response:

    reply = await answer(request, conversation, body)
    if reply is None:
        return Response(status_code=499)  # nobody is listening any more
    fault = reply.fault
    if fault is not None and fault.kind == "status":
        return error(fault.status, fault.message, retry_after=fault.retry_after)
    if fault is not None and not conversation.stream:
        if fault.kind == "malformed":
            return Response('{"model": "broken", "message": {', media_type="application/json")
        await client_left_during(request, 24 * 3600.0)  # a stall: hold on until they hang up
        return Response(status_code=499)
    prompt, completion = usage_counts(conversation, reply)
    final = {"done": True, "done_reason": "stop", "total_duration": 1_000_000,
             "load_duration": 0, "prompt_eval_count": prompt, "prompt_eval_duration": 500_000,
             "eval_count": completion, "eval_duration": 500_000}
    base = {"model": conversation.model or DEMO_MODEL}
    chunks: Iterator[dict[str, Any]] = lines(reply, base, final, conversation.stream)
    if not conversation.stream:
        return JSONResponse(next(chunks))
    return StreamingResponse(paced(_ndjson(chunks, reply), reply), media_type=_NDJSON)


def _ndjson(chunks: Iterator[dict[str, Any]], reply: Reply) -> Iterator[str]:
    for number, chunk in enumerate(chunks):
        yield json.dumps(chunk) + "\n"
        if number == 0 and reply.fault is not None and reply.fault.kind == "malformed":
            yield '{"model": "broken", "message": {"content": \n'
            return


def _chat_lines(reply: Reply, base: dict[str, Any], final: dict[str, Any],
                stream: bool) -> Iterator[dict[str, Any]]:
    calls = [{"function": {"index": i, "name": c.name, "arguments": c.arguments}}
             for i, c in enumerate(reply.tool_calls)]

    def message(content: str, **extra: Any) -> dict[str, Any]:
        return {"role": "assistant", "content": content, **extra}

    if not stream:
        whole = message(reply.text, **({"tool_calls": calls} if calls else {}))
        yield {**base, "created_at": _now(), "message": whole, **final}
        return
    for piece in pieces(reply.text) if reply.text else [""]:
        yield {**base, "created_at": _now(), "message": message(piece), "done": False}
    if calls:
        yield {**base, "created_at": _now(), "message": message("", tool_calls=calls),
               "done": False}
    yield {**base, "created_at": _now(), "message": message(""), **final}


def _generate_lines(reply: Reply, base: dict[str, Any], final: dict[str, Any],
                    stream: bool) -> Iterator[dict[str, Any]]:
    text = reply.text or json.dumps([{"name": c.name, "arguments": c.arguments}
                                     for c in reply.tool_calls])
    if not stream:
        yield {**base, "created_at": _now(), "response": text, **final}
        return
    for piece in pieces(text) if text else [""]:
        yield {**base, "created_at": _now(), "response": piece, "done": False}
    yield {**base, "created_at": _now(), "response": "", **final}
