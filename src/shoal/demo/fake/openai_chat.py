"""OpenAI Chat Completions (`POST /v1/chat/completions`, `GET /v1/models`) for the fake server.

JSON, or `text/event-stream` with content and tool-call deltas and, when asked for with
`stream_options.include_usage`, a final usage chunk.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from shoal.demo.fake.exchange import DEMO_MODEL, answer, next_id, record
from shoal.demo.fake.wire import (
    Conversation,
    Message,
    Reply,
    ToolCall,
    ToolSpec,
    json_object,
    paced,
    pieces,
    schema_parameters,
    text_of,
    usage_counts,
)

API = "openai_chat"


def routes() -> list[BaseRoute]:
    return [
        Route("/v1/chat/completions", _chat_completions, methods=["POST"]),
        Route("/v1/models", _models, methods=["GET"]),
    ]


async def _models(request: Request) -> Response:

    record(request, "openai_models")
    return JSONResponse({"object": "list", "data": [
        {"id": DEMO_MODEL, "object": "model", "created": 0, "owned_by": "shoal"}]})


def decode(body: dict[str, Any]) -> Conversation:
    """A Chat Completions request as a neutral conversation."""
    messages: list[Message] = []
    for m in body["messages"]:
        if not isinstance(m, dict):
            continue
        role = m.get("role")
        if role in ("system", "developer"):
            messages.append(Message("system", text_of(m.get("content"))))
        elif role == "user":
            messages.append(Message("user", text_of(m.get("content"))))
        elif role == "assistant":
            calls = tuple(
                ToolCall(str(c.get("function", {}).get("name", "")),
                         json_object(c.get("function", {}).get("arguments")), str(c.get("id", "")))
                for c in m.get("tool_calls") or [] if isinstance(c, dict))
            messages.append(Message("assistant", text_of(m.get("content")), calls))
        elif role == "tool":
            messages.append(Message("tool", text_of(m.get("content"))))
    tools = tuple(
        ToolSpec(str(t["function"].get("name", "")),
                 schema_parameters(t["function"].get("parameters")))
        for t in body.get("tools") or []
        if isinstance(t, dict) and isinstance(t.get("function"), dict))
    return Conversation(API, str(body.get("model", "")), tuple(messages), tools,
                        bool(body.get("stream")))


async def _chat_completions(request: Request) -> Response:

    try:
        body = await request.json()
    except ValueError:
        return error(400, "The request body is not JSON. Send a Chat Completions request.")
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
        return error(400, "`messages` must be a list of chat messages.")
    conversation = decode(body)
    reply = await answer(request, conversation, body)
    if reply is None:
        return Response(status_code=499)  # nobody is listening any more
    fault = reply.fault
    if fault is not None and fault.kind == "status":
        return error(fault.status, fault.message, kind="server_error" if fault.status >= 500
                     else "rate_limit_error", retry_after=fault.retry_after)
    if fault is not None and fault.kind == "malformed" and not conversation.stream:
        return Response('{"id": "chatcmpl-broken", "choices": [', media_type="application/json")
    number = next_id(request)
    prompt, completion = usage_counts(conversation, reply)
    usage = {"prompt_tokens": prompt, "completion_tokens": completion,
             "total_tokens": prompt + completion}
    if conversation.stream:
        options = body.get("stream_options") or {}
        events = _chunks(reply, number, usage if options.get("include_usage") else None,
                         str(body.get("model", "")))
        return StreamingResponse(paced(events, reply), media_type="text/event-stream")
    return JSONResponse(_completion(reply, number, usage, str(body.get("model", ""))))


def error(status: int, message: str, *, kind: str = "invalid_request_error",
          code: str | None = None, retry_after: float | None = None) -> Response:
    """An OpenAI-style error body.

    Without `retry_after`, `x-should-retry: false` stops the OpenAI SDKs from retrying a
    scripted failure; with it, `Retry-After` tells the client when to come back.
    """
    headers = ({"retry-after": f"{retry_after:g}"} if retry_after is not None
               else {"x-should-retry": "false"})
    return JSONResponse({"error": {"message": message, "type": kind, "param": None,
                                   "code": code}}, status_code=status, headers=headers)


def _wire_calls(reply: Reply, number: int) -> list[dict[str, Any]]:
    return [{"id": c.id or f"call_demo_{number}_{i}", "type": "function",
             "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
            for i, c in enumerate(reply.tool_calls)]


def _completion(reply: Reply, number: int, usage: dict[str, int], model: str) -> dict[str, Any]:

    message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
    if reply.tool_calls:
        message["tool_calls"] = _wire_calls(reply, number)
    return {
        "id": f"chatcmpl-demo-{number}", "object": "chat.completion", "created": int(time.time()),
        "model": DEMO_MODEL, "system_fingerprint": "shoal-demo",
        "choices": [{"index": 0, "message": message, "logprobs": None,
                     "finish_reason": "tool_calls" if reply.tool_calls else "stop"}],
        "usage": usage,
    }


def _chunks(reply: Reply, number: int, usage: dict[str, int] | None,
            model: str) -> Iterator[str]:

    base = {"id": f"chatcmpl-demo-{number}", "object": "chat.completion.chunk",
            "created": int(time.time()), "model": DEMO_MODEL}

    def event(delta: dict[str, Any], finish: str | None = None) -> str:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return f"data: {json.dumps({**base, 'choices': [choice]})}\n\n"

    yield event({"role": "assistant", "content": ""})
    if reply.fault is not None and reply.fault.kind == "malformed":
        yield 'data: {"id": "chatcmpl-broken", "choices": [{"delta": \n\n'
        return
    for piece in pieces(reply.text):
        yield event({"content": piece})
    for index, call in enumerate(_wire_calls(reply, number)):
        yield event({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                     "function": {"name": call["function"]["name"],
                                                  "arguments": ""}}]})
        for piece in pieces(call["function"]["arguments"]):
            yield event({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    yield event({}, "tool_calls" if reply.tool_calls else "stop")
    if usage is not None:
        yield f"data: {json.dumps({**base, 'choices': [], 'usage': usage})}\n\n"
    yield "data: [DONE]\n\n"
