"""OpenAI Responses API (`POST /v1/responses`) for the fake server.

The API the Codex CLI speaks (and the OpenAI SDKs' `responses.create`). A request's
`instructions` and `input` (a string, or items: messages, `function_call`s and their
`function_call_output`s; reasoning items are skipped) become a neutral conversation; only
`{"type": "function"}` tools are offered to the script (built-in ones such as `web_search`
are ignored), and the functions of a `{"type": "namespace"}` group (how Codex offers an MCP
server's tools) as `<namespace>__<name>`, called back with their `namespace`. The answer is
one JSON response object, or a `text/event-stream` of typed events
(`event:` and `data:` lines) ending in `response.completed` with the usage.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from shoal.demo.fake.exchange import DEMO_MODEL, answer, client_left_during, next_id
from shoal.demo.fake.openai_chat import error
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

API = "openai_responses"
_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}


def routes() -> list[BaseRoute]:
    return [Route("/v1/responses", _responses, methods=["POST"])]


# ---- decoding ----------------------------------------------------------------------------


def decode(body: dict[str, Any]) -> Conversation:
    """A Responses API request as a neutral conversation."""
    messages: list[Message] = []
    if isinstance(instructions := body.get("instructions"), str) and instructions:
        messages.append(Message("system", instructions))
    raw = body.get("input")
    items = [{"type": "message", "role": "user", "content": raw}] if isinstance(raw, str) \
        else [item for item in raw or [] if isinstance(item, dict)]
    for item in items:
        _decode_item(item, messages)
    tools = tuple(ToolSpec(name, schema_parameters(t.get("parameters")))
                  for name, t in _functions(body).items())
    return Conversation(API, str(body.get("model", "")), tuple(messages), tools,
                        bool(body.get("stream")))


def _functions(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The function tools a request offers by the name the script calls them, a namespace's
    as `<namespace>__<name>`."""
    found: dict[str, dict[str, Any]] = {}
    for tool in body.get("tools") or []:
        if not isinstance(tool, dict):
            continue
        if tool.get("type") == "function":
            found[str(tool.get("name", ""))] = tool
        elif tool.get("type") == "namespace":
            for inner in tool.get("tools") or []:
                if isinstance(inner, dict) and inner.get("type") == "function":
                    found[f"{tool.get('name')}__{inner.get('name')}"] = {
                        **inner, "namespace": tool.get("name")}
    return found


def _decode_item(item: dict[str, Any], messages: list[Message]) -> None:
    kind = item.get("type", "message")
    if kind == "message":
        role = _ROLES.get(str(item.get("role")))
        if role == "system":
            messages.append(Message("system", text_of(item.get("content"))))
        elif role == "user":
            messages.append(Message("user", text_of(item.get("content"))))
        elif role == "assistant":
            messages.append(Message("assistant", text_of(item.get("content"))))
    elif kind == "function_call":
        name = str(item.get("name", ""))
        if item.get("namespace"):
            name = f"{item['namespace']}__{name}"
        call = ToolCall(name, json_object(item.get("arguments")), str(item.get("call_id", "")))
        last = messages[-1] if messages else None
        if last is not None and last.role == "assistant":  # parallel calls: one assistant turn
            messages[-1] = Message("assistant", last.text, (*last.tool_calls, call))
        else:
            messages.append(Message("assistant", "", (call,)))
    elif kind == "function_call_output":
        output = item.get("output")
        messages.append(Message("tool", output if isinstance(output, str) else text_of(output)))


# ---- the route ---------------------------------------------------------------------------


async def _responses(request: Request) -> Response:

    try:
        body = await request.json()
    except ValueError:
        return error(400, "The request body is not JSON. Send a Responses API request.")
    if not isinstance(body, dict) or not isinstance(body.get("input"), str | list):
        return error(400, "`input` must be a string or a list of input items.")
    conversation = decode(body)
    reply = await answer(request, conversation, body)
    if reply is None:
        return Response(status_code=499)  # nobody is listening any more
    fault = reply.fault
    if fault is not None and fault.kind == "status":
        kind = ("server_error" if fault.status >= 500 else "rate_limit_error"
                if fault.status == 429 else "invalid_request_error")
        return error(fault.status, fault.message, kind=kind, retry_after=fault.retry_after)
    if fault is not None and not conversation.stream:
        if fault.kind == "malformed":
            return Response('{"id": "resp_broken", "output": [', media_type="application/json")
        await client_left_during(request, 24 * 3600.0)  # a stall: hold on until they hang up
        return Response(status_code=499)
    number = next_id(request)
    input_tokens, output_tokens = usage_counts(conversation, reply)
    usage = {"input_tokens": input_tokens, "input_tokens_details": {"cached_tokens": 0},
             "output_tokens": output_tokens, "output_tokens_details": {"reasoning_tokens": 0},
             "total_tokens": input_tokens + output_tokens}
    response = _response(body, number, _items(reply, number, _functions(body)), usage)
    if conversation.stream:
        return StreamingResponse(paced(_events(reply, response), reply),
                                 media_type="text/event-stream")
    return Response(json.dumps(response), media_type="application/json")


def _items(reply: Reply, number: int,
           functions: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The output items of a reply: a message for its text, then one per tool call (with its
    `namespace` when the tool is in one)."""
    items: list[dict[str, Any]] = []
    if reply.text or not reply.tool_calls:
        items.append({"type": "message", "id": f"msg_demo_{number}", "status": "completed",
                      "role": "assistant", "content": [
                          {"type": "output_text", "text": reply.text, "annotations": []}]})
    for index, call in enumerate(reply.tool_calls):
        item = {"type": "function_call", "id": f"fc_demo_{number}_{index}",
                "status": "completed", "call_id": call.id or f"call_demo_{number}_{index}",
                "name": call.name, "arguments": json.dumps(call.arguments)}
        if namespace := functions.get(call.name, {}).get("namespace"):
            item |= {"name": functions[call.name]["name"], "namespace": namespace}
        items.append(item)
    return items


def _response(body: dict[str, Any], number: int, output: list[dict[str, Any]],
              usage: dict[str, Any]) -> dict[str, Any]:

    return {
        "id": f"resp_demo_{number}", "object": "response", "created_at": int(time.time()),
        "status": "completed", "model": DEMO_MODEL, "output": output, "usage": usage,
        "error": None, "incomplete_details": None, "instructions": body.get("instructions"),
        "metadata": {}, "parallel_tool_calls": bool(body.get("parallel_tool_calls", True)),
        "tool_choice": body.get("tool_choice", "auto"), "tools": body.get("tools") or [],
        "temperature": None, "top_p": None, "text": {"format": {"type": "text"}},
        "reasoning": None, "store": False,
    }


def _events(reply: Reply, response: dict[str, Any]) -> Iterator[str]:
    """The stream of one response: created, each item piece by piece, completed."""
    sequence = iter(range(1_000_000_000))

    def event(kind: str, **fields: Any) -> str:
        data = {"type": kind, "sequence_number": next(sequence), **fields}
        return f"event: {kind}\ndata: {json.dumps(data)}\n\n"

    pending = {**response, "status": "in_progress", "output": [], "usage": None}
    yield event("response.created", response=pending)
    if reply.fault is not None and reply.fault.kind == "malformed":
        yield 'event: response.in_progress\ndata: {"type": "response.in_progress", "resp\n\n'
        return
    yield event("response.in_progress", response=pending)
    for index, item in enumerate(response["output"]):
        yield from _item_events(event, index, item)
    yield event("response.completed", response=response)


def _item_events(event: Callable[..., str], index: int, item: dict[str, Any]) -> Iterator[str]:
    where = {"item_id": item["id"], "output_index": index}
    if item["type"] == "message":
        text = item["content"][0]["text"]
        yield event("response.output_item.added", output_index=index,
                    item={**item, "status": "in_progress", "content": []})
        part = {"type": "output_text", "text": "", "annotations": []}
        yield event("response.content_part.added", **where, content_index=0, part=part)
        for piece in pieces(text):
            yield event("response.output_text.delta", **where, content_index=0, delta=piece,
                        logprobs=[])
        yield event("response.output_text.done", **where, content_index=0, text=text,
                    logprobs=[])
        yield event("response.content_part.done", **where, content_index=0,
                    part={**part, "text": text})
    else:
        yield event("response.output_item.added", output_index=index,
                    item={**item, "status": "in_progress", "arguments": ""})
        for piece in pieces(item["arguments"]):
            yield event("response.function_call_arguments.delta", **where, delta=piece)
        yield event("response.function_call_arguments.done", **where,
                    arguments=item["arguments"])
    yield event("response.output_item.done", output_index=index, item=item)
