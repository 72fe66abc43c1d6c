"""The fake server's Anthropic Messages API, driven by the official `anthropic` SDK."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import httpx2  # the HTTP client the anthropic SDK uses; its read time-outs surface as is
import pytest
from anthropic.types import MessageParam, ToolParam
from starlette.applications import Starlette

from shoal.demo.fake.anthropic import decode
from shoal.demo.fake.exchange import recorded_requests, request_log
from shoal.demo.fake.server import running_fake_server
from shoal.demo.model import create_demo_model_app

CODER = "You are Shoal's coder agent. Role: coder.\nWorkspace: /work/ws"
PLANNER = "You are Shoal's planner agent. Role: planner."
WRITE: ToolParam = {"name": "Write", "description": "Write a file.", "input_schema": {
    "type": "object", "properties": {"file_path": {"type": "string"},
                                     "content": {"type": "string"}},
    "required": ["file_path", "content"]}}


@pytest.fixture
def app() -> Starlette:
    return create_demo_model_app()


@pytest.fixture
async def root(app: Starlette) -> AsyncIterator[str]:
    async with running_fake_server(app) as url:
        yield url


def client(root: str, **options: Any) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=root, api_key="sk-ant-test", **options)


def user(text: str) -> list[MessageParam]:
    return [{"role": "user", "content": text}]


async def test_create_answers_with_text_and_usage(root: str) -> None:
    """A plain request gets a text message, an end_turn and token counts."""
    async with client(root) as sdk:
        message = await sdk.messages.create(
            model="claude-test", max_tokens=100, system=PLANNER,
            messages=user("Plan it. [demo:long=80]"))
    assert message.stop_reason == "end_turn"
    assert message.content[0].type == "text"
    assert len(message.content[0].text) == 80
    assert message.model == "claude-test"
    assert message.usage.input_tokens > 0
    assert message.usage.output_tokens > 0


async def test_stream_reassembles_text(root: str) -> None:
    """A streamed answer arrives in several deltas and reassembles to the whole text."""
    async with client(root) as sdk, sdk.messages.stream(
        model="claude-test", max_tokens=100, system=PLANNER,
        messages=user("Plan it. [demo:long=300]")
    ) as stream:
        deltas = [text async for text in stream.text_stream]
        final = await stream.get_final_message()
    assert len(deltas) > 1
    assert "".join(deltas) == final.content[0].text  # type: ignore[union-attr]
    assert len("".join(deltas)) == 300
    assert final.usage.output_tokens > 1


async def test_tool_use_round_trip(root: str, app: Starlette) -> None:
    """The fake calls the offered Write tool with an absolute path, then summarises the result."""
    async with client(root) as sdk:
        async with sdk.messages.stream(model="claude-test", max_tokens=100, system=CODER,
                                       tools=[WRITE],
                                       messages=user("Write hello.py: print hello")) as stream:
            first = await stream.get_final_message()
        call = next(b for b in first.content if b.type == "tool_use")
        assert first.stop_reason == "tool_use"
        assert call.name == "Write"
        assert call.input["file_path"] == "/work/ws/hello.py"
        second = await sdk.messages.create(
            model="claude-test", max_tokens=100, system=CODER, tools=[WRITE], messages=[
                *user("Write hello.py: print hello"),
                {"role": "assistant", "content": first.content},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                              "content": "File created successfully"}]}])
    assert second.stop_reason == "end_turn"
    assert second.content[0].text.startswith("[demo model] Wrote hello.py")  # type: ignore[union-attr]
    sent = recorded_requests(app, "anthropic")
    assert len(sent) == 2
    assert sent[0]["stream"] is True


async def test_rate_limit_retry_after_is_honoured(root: str, app: Starlette) -> None:
    """A 429 with Retry-After is retried by the SDK after that delay, then answered."""
    started = time.monotonic()
    async with client(root, max_retries=2) as sdk:
        message = await sdk.messages.create(
            model="claude-test", max_tokens=100, system=PLANNER,
            messages=user("Plan it. [demo:status=429,retry-after=1,times=1]"))
    assert message.content[0].type == "text"
    assert time.monotonic() - started >= 1.0  # the SDK's own backoff would be ~0.5 s
    log = [r for r in request_log(app) if r.api == "anthropic"]
    assert len(log) == 2
    assert log[1].headers.get("x-stainless-retry-count") == "1"


async def test_scripted_failure_is_an_anthropic_error_not_retried(root: str,
                                                                  app: Starlette) -> None:
    """`[demo:fail]` is an api_error the SDK does not retry (x-should-retry: false)."""
    async with client(root, max_retries=3) as sdk:
        with pytest.raises(anthropic.InternalServerError) as caught:
            await sdk.messages.create(model="claude-test", max_tokens=100,
                                      messages=user("Hello [demo:fail]"))
    body = caught.value.response.json()
    assert body["type"] == "error"
    assert body["error"]["type"] == "api_error"
    assert "[demo:fail]" in body["error"]["message"]
    assert caught.value.response.headers["x-should-retry"] == "false"
    assert len(recorded_requests(app, "anthropic")) == 1


async def test_malformed_body_is_a_client_side_error(root: str) -> None:
    """A malformed JSON answer makes the SDK fail instead of returning a message."""
    async with client(root, max_retries=0) as sdk:
        with pytest.raises(json.JSONDecodeError):
            await sdk.messages.create(model="claude-test", max_tokens=100,
                                      messages=user("Hello [demo:malformed]"))


async def test_malformed_stream_event_fails_the_stream(root: str) -> None:
    """A stream event that is not JSON makes the streaming client fail."""
    async with client(root, max_retries=0) as sdk:
        with pytest.raises(json.JSONDecodeError):
            async with sdk.messages.stream(model="claude-test", max_tokens=100,
                                           messages=user("Hello [demo:malformed]")) as stream:
                await stream.get_final_message()


async def test_stall_runs_into_the_client_timeout(root: str) -> None:
    """A stream that stops after message_start ends in the client's read time-out."""
    async with client(root, max_retries=0, timeout=0.5) as sdk:
        with pytest.raises(httpx2.ReadTimeout):
            async with sdk.messages.stream(model="claude-test", max_tokens=100,
                                           messages=user("Hello [demo:stall]")) as stream:
                await stream.get_final_message()


async def test_count_tokens(root: str) -> None:
    """count_tokens answers a positive count."""
    async with client(root) as sdk:
        counted = await sdk.messages.count_tokens(model="claude-test",
                                                  messages=user("How many tokens is this?"))
    assert counted.input_tokens > 0


def test_decode_handles_claude_code_quirks() -> None:
    """System blocks, mid-conversation system entries, reminders and tool results decode."""
    conversation = decode({
        "model": "claude-opus", "stream": True,
        "system": [{"type": "text", "text": "You are Claude Code."}],
        "tools": [WRITE],
        "messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "<system-reminder>\nnoise\n</system-reminder>"},
                {"type": "text", "text": "Write hello.py", "cache_control": {"type": "x"}}]},
            {"role": "system", "content": "Agents: …"},
            {"role": "assistant", "content": [
                {"type": "text", "text": "On it."},
                {"type": "tool_use", "id": "toolu_1", "name": "Write",
                 "input": {"file_path": "/w/hello.py", "content": "x"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1",
                 "content": [{"type": "text", "text": "File created"}]},
                {"type": "text", "text": "<system-reminder>more</system-reminder>"}]},
        ]})
    roles = [m.role for m in conversation.messages]
    assert roles == ["system", "user", "system", "assistant", "tool"]
    assert conversation.texts("user") == ["Write hello.py"]
    assert conversation.messages[3].tool_calls[0].arguments["file_path"] == "/w/hello.py"
    assert conversation.texts("tool") == ["File created"]
    assert conversation.tools[0].parameters == ("file_path", "content")
    assert conversation.stream
