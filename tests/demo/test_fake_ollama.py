"""The fake server's Ollama API, driven by the official `ollama` Python client over real HTTP."""

from __future__ import annotations

import json
from collections.abc import AsyncIterable, AsyncIterator
from typing import Any

import httpx
import ollama
import pytest
from starlette.applications import Starlette

from shoal.demo.fake.exchange import DEMO_MODEL, request_log
from shoal.demo.fake.server import running_fake_server
from shoal.demo.model import create_demo_model_app

PLANNER = "You are Shoal's planner agent. Role: planner."
RUN_COMMAND: dict[str, Any] = {
    "type": "function",
    "function": {"name": "run_command", "description": "Run a shell command.",
                 "parameters": {"type": "object", "required": ["command"],
                                "properties": {"command": {"type": "string"}}}},
}


@pytest.fixture
def app() -> Starlette:
    return create_demo_model_app()


@pytest.fixture
async def root(app: Starlette) -> AsyncIterator[str]:
    async with running_fake_server(app) as url:
        yield url


@pytest.fixture
async def client(root: str) -> AsyncIterator[ollama.AsyncClient]:
    async with ollama.AsyncClient(host=root) as client:
        yield client


async def read_into(seen: list[Any], parts: AsyncIterable[Any]) -> None:
    """Keep each part of a stream until it ends (or breaks)."""
    async for part in parts:
        seen.append(part)


def planner_chat(task: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": PLANNER}, {"role": "user", "content": f"Task: {task}"}]


async def test_plain_chat_answers_with_counts(client: ollama.AsyncClient) -> None:
    """A non-streamed chat returns the whole plan in one message, with token counts."""
    response = await client.chat(model="llama3.1", messages=planner_chat("Build a todo app"),
                                 stream=False)
    plan = json.loads(response.message.content or "")
    assert plan[0]["name"] == "Todo storage module"
    assert response.done
    assert response.done_reason == "stop"
    assert response.model == "llama3.1"
    assert (response.prompt_eval_count or 0) > 0
    assert (response.eval_count or 0) > 0


async def test_streamed_chat_reassembles(client: ollama.AsyncClient) -> None:
    """A streamed chat arrives in several NDJSON pieces that join into the plan."""
    parts = [part async for part in await client.chat(
        model=DEMO_MODEL, messages=planner_chat("Build a URL shortener"), stream=True)]
    text = "".join(part.message.content or "" for part in parts)
    assert [step["name"] for step in json.loads(text)] == [
        "Design notes", "Implementation", "Tests"]
    assert len(parts) > 2
    assert not parts[0].done
    assert parts[-1].done
    assert (parts[-1].eval_count or 0) > 0


async def test_tool_call_round_trip(client: ollama.AsyncClient, app: Starlette) -> None:
    """A tool call arrives with object arguments; its result (role tool) gets the summary."""
    messages: list[Any] = [{"role": "user", "content": "Write hello.py: print hello"}]
    first = await client.chat(model=DEMO_MODEL, messages=messages, tools=[RUN_COMMAND],
                              stream=False)
    calls = first.message.tool_calls or []
    assert [c.function.name for c in calls] == ["run_command"]
    assert "hello.py" in calls[0].function.arguments["command"]
    messages += [first.message, {"role": "tool", "content": "exit code 0",
                                 "tool_name": "run_command"}]
    second = await client.chat(model=DEMO_MODEL, messages=messages, tools=[RUN_COMMAND])
    assert (second.message.content or "").startswith("[demo model] Wrote hello.py (")
    conversation = request_log(app)[-1].conversation
    assert conversation is not None
    assert [m.role for m in conversation.messages] == ["user", "assistant", "tool"]
    assert conversation.messages[1].tool_calls[0].arguments == calls[0].function.arguments


async def test_streamed_tool_call(client: ollama.AsyncClient) -> None:
    """In a stream the tool call comes whole in one chunk before the final one."""
    parts = [part async for part in await client.chat(
        model=DEMO_MODEL, messages=[{"role": "user", "content": "Write a.py: print a"}],
        tools=[RUN_COMMAND], stream=True)]
    calls = [c for part in parts for c in part.message.tool_calls or []]
    assert [c.function.name for c in calls] == ["run_command"]
    assert parts[-1].done


async def test_generate_plain_and_streamed(client: ollama.AsyncClient) -> None:
    """`generate` answers a prompt whole or in pieces; a system prompt sets the role."""
    whole = await client.generate(model=DEMO_MODEL, system=PLANNER,
                                  prompt="Task: Build a todo app", stream=False)
    assert json.loads(whole.response or "")[0]["name"] == "Todo storage module"
    parts = [part async for part in await client.generate(
        model=DEMO_MODEL, system=PLANNER, prompt="Task: Build a todo app", stream=True)]
    assert "".join(p.response or "" for p in parts) == whole.response
    assert parts[-1].done


async def test_tags_show_and_version(client: ollama.AsyncClient, root: str) -> None:
    """The model list names the demo model; `show` accepts any name; the version is recent."""
    listed = await client.list()
    assert [m.model for m in listed.models] == [f"{DEMO_MODEL}:latest"]
    shown = await client.show("llama3.1")
    assert "tools" in (shown.capabilities or [])
    async with httpx.AsyncClient(base_url=root) as http:
        version = (await http.get("/api/version")).json()["version"]
    assert tuple(int(n) for n in version.split(".")) >= (0, 13, 4)  # what Codex --oss needs


async def test_status_fault_is_an_ollama_error(client: ollama.AsyncClient, root: str) -> None:
    """A scripted 429 is `{"error": …}` with Retry-After; the client raises ResponseError."""
    messages = [{"role": "user", "content": "Hi [demo:status=429,retry-after=2]"}]
    with pytest.raises(ollama.ResponseError) as caught:
        await client.chat(model=DEMO_MODEL, messages=messages, stream=False)
    assert caught.value.status_code == 429
    assert "Scripted HTTP 429" in caught.value.error
    async with httpx.AsyncClient(base_url=root) as http:
        raw = await http.post("/api/chat", json={"model": DEMO_MODEL, "messages": messages})
    assert raw.headers["retry-after"] == "2"
    assert set(raw.json()) == {"error"}


async def test_malformed_stream_line(client: ollama.AsyncClient) -> None:
    """A malformed stream sends one good line, then one that is not JSON."""
    seen: list[Any] = []
    parts = await client.chat(model=DEMO_MODEL, stream=True,
                              messages=[{"role": "user", "content": "Hi [demo:malformed]"}])
    with pytest.raises(json.JSONDecodeError):
        await read_into(seen, parts)
    assert len(seen) == 1


async def test_stalled_stream_hits_the_client_timeout(root: str) -> None:
    """A stalled stream sends its first line and then nothing, until the client gives up."""
    seen: list[Any] = []
    async with ollama.AsyncClient(host=root, timeout=0.5) as client:
        parts = await client.chat(model=DEMO_MODEL, stream=True,
                                  messages=[{"role": "user", "content": "Hi [demo:stall]"}])
        with pytest.raises(httpx.ReadTimeout):
            await read_into(seen, parts)
    assert len(seen) == 1
