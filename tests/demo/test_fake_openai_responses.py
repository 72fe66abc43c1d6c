"""The fake server's OpenAI Responses API, driven by the official OpenAI SDK over real HTTP."""

from __future__ import annotations

import json
from collections.abc import AsyncIterable, AsyncIterator
from typing import Any

import openai
import pytest
from openai.types.responses import FunctionToolParam, ResponseInputParam
from starlette.applications import Starlette

from shoal.demo.fake.exchange import DEMO_MODEL, request_log
from shoal.demo.fake.openai_responses import decode
from shoal.demo.fake.server import running_fake_server
from shoal.demo.model import create_demo_model_app

PLANNER = "You are Shoal's planner agent. Role: planner."
RUN_COMMAND: FunctionToolParam = {
    "type": "function", "name": "run_command", "strict": False,
    "description": "Run a shell command in the workspace.",
    "parameters": {"type": "object", "properties": {"command": {"type": "string"}},
                   "required": ["command"]},
}


@pytest.fixture
def app() -> Starlette:
    return create_demo_model_app()


@pytest.fixture
async def client(app: Starlette) -> AsyncIterator[openai.AsyncOpenAI]:
    async with running_fake_server(app) as root, openai.AsyncOpenAI(
        base_url=f"{root}/v1", api_key="sk-test", max_retries=0
    ) as client:
        yield client


async def read_into(seen: list[str], stream: AsyncIterable[Any]) -> None:
    """Note the type of each event of `stream` until it ends (or breaks)."""
    async for event in stream:
        seen.append(event.type)


def responses_requests(app: Starlette) -> list[Any]:
    return [r for r in request_log(app) if r.path == "/v1/responses"]


async def test_plain_response_carries_the_plan_and_usage(client: openai.AsyncOpenAI) -> None:
    """A non-streamed planner request gets the todo plan as output text, with usage."""
    response = await client.responses.create(
        model="anything", instructions=PLANNER, input="Plan it.\nTask: Build a CLI todo app")
    plan = json.loads(response.output_text)
    assert plan[0]["name"] == "Todo storage module"
    assert response.model == DEMO_MODEL
    assert response.status == "completed"
    assert response.usage is not None
    assert response.usage.input_tokens > 0
    assert response.usage.output_tokens > 0


async def test_streamed_response_reassembles(client: openai.AsyncOpenAI) -> None:
    """The SDK's stream helper rebuilds a long streamed text from its deltas."""
    async with client.responses.stream(
        model=DEMO_MODEL, instructions=PLANNER,
        input=[{"role": "user", "content": "Task:\nBuild a URL shortener service"}],
    ) as stream:
        kinds = [event.type async for event in stream]
        final = await stream.get_final_response()
    plan = json.loads(final.output_text)
    assert [step["name"] for step in plan] == ["Design notes", "Implementation", "Tests"]
    assert kinds[0] == "response.created"
    assert kinds[-1] == "response.completed"
    assert kinds.count("response.output_text.delta") > 1
    assert "response.output_text.done" in kinds
    assert final.usage is not None
    assert final.usage.total_tokens > 0


async def test_function_call_round_trip(client: openai.AsyncOpenAI, app: Starlette) -> None:
    """A streamed function call comes back whole; its output leads to the closing summary."""
    task = "Write hello.py: print hello"
    stream = await client.responses.create(model=DEMO_MODEL, input=task, tools=[RUN_COMMAND],
                                           stream=True)
    done = [event async for event in stream if event.type == "response.output_item.done"]
    call = done[0].item
    assert call.type == "function_call"
    assert call.name == "run_command"  # the script's write_file, fitted to the offered shell
    command = json.loads(call.arguments)["command"]
    assert "hello.py" in command
    follow_up: ResponseInputParam = [
        {"role": "user", "content": task},
        {"type": "function_call", "call_id": call.call_id, "name": call.name,
         "arguments": call.arguments},
        {"type": "function_call_output", "call_id": call.call_id, "output": "exit code 0"},
    ]
    answer = await client.responses.create(model=DEMO_MODEL, input=follow_up,
                                           tools=[RUN_COMMAND])
    assert answer.output_text.startswith("[demo model] Wrote hello.py (")
    second = responses_requests(app)[-1].conversation
    assert second is not None
    assert [m.role for m in second.messages] == ["user", "assistant", "tool"]


def test_decode_skips_reasoning_and_builtin_tools() -> None:
    """Developer messages are system text, reasoning items and non-function tools are ignored."""
    conversation = decode({
        "model": "m", "instructions": "Be brief.", "stream": True,
        "input": [
            {"type": "message", "role": "developer",
             "content": [{"type": "input_text", "text": "Role: coder"}]},
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "message", "role": "assistant",
             "content": [{"type": "output_text", "text": "Sure."}]},
            {"type": "message", "role": "user",
             "content": [{"type": "input_text", "text": "Go"}]},
        ],
        "tools": [{"type": "web_search"}, RUN_COMMAND],
    })
    assert [(m.role, m.text) for m in conversation.messages] == [
        ("system", "Be brief."), ("system", "Role: coder"), ("assistant", "Sure."),
        ("user", "Go")]
    assert [t.name for t in conversation.tools] == ["run_command"]
    assert conversation.tools[0].parameters == ("command",)
    assert conversation.stream


async def test_rate_limit_is_retried_after_retry_after(app: Starlette) -> None:
    """A 429 with Retry-After (times=1) is retried by the SDK, and the retry succeeds."""
    async with running_fake_server(app) as root, openai.AsyncOpenAI(
        base_url=f"{root}/v1", api_key="sk-test", max_retries=2
    ) as client:
        response = await client.responses.create(
            model=DEMO_MODEL, instructions=PLANNER,
            input="Task: Build a todo app [demo:status=429,retry-after=0.1,times=1]")
    assert json.loads(response.output_text)[0]["name"] == "Todo storage module"
    assert len(responses_requests(app)) == 2  # the refused one and the retry


async def test_scripted_failure_is_not_retried(client: openai.AsyncOpenAI,
                                               app: Starlette) -> None:
    """A scripted 500 is an OpenAI-shaped error that tells the SDK not to retry."""
    async with openai.AsyncOpenAI(base_url=str(client.base_url), api_key="sk-test",
                                  max_retries=3) as retrying:
        with pytest.raises(openai.InternalServerError) as caught:
            await retrying.responses.create(model=DEMO_MODEL, input="Write a.py [demo:fail]")
    assert "[demo:fail]" in caught.value.message
    assert caught.value.response.headers["x-should-retry"] == "false"
    assert len(responses_requests(app)) == 1


async def test_malformed_body_is_refused(client: openai.AsyncOpenAI) -> None:
    """A malformed (non-JSON) answer makes the SDK fail instead of returning garbage."""
    with pytest.raises((openai.APIError, json.JSONDecodeError)):
        await client.responses.create(model=DEMO_MODEL, input="Write a.py [demo:malformed]")


async def test_malformed_stream_event_is_refused(client: openai.AsyncOpenAI) -> None:
    """A stream whose second event is not JSON breaks the SDK's stream."""
    stream = await client.responses.create(model=DEMO_MODEL, stream=True,
                                           input="Write a.py [demo:malformed]")
    seen: list[str] = []
    with pytest.raises((openai.APIError, json.JSONDecodeError)):
        await read_into(seen, stream)
    assert seen == ["response.created"]


async def test_stalled_stream_hits_the_client_timeout(app: Starlette) -> None:
    """A stalled stream sends one event and then nothing, so the client's read timeout fires."""
    async with running_fake_server(app) as root, openai.AsyncOpenAI(
        base_url=f"{root}/v1", api_key="sk-test", max_retries=0, timeout=0.5
    ) as client:
        stream = await client.responses.create(model=DEMO_MODEL, stream=True,
                                               input="Write a.py [demo:stall]")
        seen: list[str] = []
        with pytest.raises(openai.APITimeoutError):
            await read_into(seen, stream)
    assert seen == ["response.created"]


async def test_bad_request_is_an_openai_error(client: openai.AsyncOpenAI) -> None:
    """A request without `input` gets a 400 in OpenAI's error shape."""
    with pytest.raises(openai.BadRequestError) as caught:
        await client.post("/responses", body={"model": DEMO_MODEL}, cast_to=object)
    assert "`input`" in caught.value.message


async def test_stalled_plain_request_hits_the_client_timeout(app: Starlette) -> None:
    """A stalled non-streamed request gets no answer at all until the client gives up."""
    async with running_fake_server(app) as root, openai.AsyncOpenAI(
        base_url=f"{root}/v1", api_key="sk-test", max_retries=0, timeout=0.5
    ) as client:
        with pytest.raises(openai.APITimeoutError):
            await client.responses.create(model=DEMO_MODEL, input="Write a.py [demo:stall]")
