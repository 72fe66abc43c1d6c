"""The fake server's Gemini API, driven by the official google-genai SDK and by raw HTTP."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import httpx2  # google-genai's HTTP client (a fork of httpx), whose errors the SDK raises
import pytest
from google import genai
from google.genai import errors, types
from starlette.applications import Starlette

from shoal.demo.fake.exchange import request_log
from shoal.demo.fake.gemini import fill_schema
from shoal.demo.fake.server import running_fake_server
from shoal.demo.model import create_demo_model_app

PLANNER = "You are Shoal's planner agent. Role: planner."
CODER = "You are Shoal's coder agent. Role: coder.\nWorkspace: /work/ws"
KEY = "test-key"
WRITE_FILE = types.FunctionDeclaration(
    name="write_file", description="Write a file.",
    parameters_json_schema={"type": "object", "properties": {
        "file_path": {"type": "string"}, "content": {"type": "string"}}})


@pytest.fixture
def app() -> Starlette:
    return create_demo_model_app()


@pytest.fixture
async def root(app: Starlette) -> AsyncIterator[str]:
    async with running_fake_server(app) as url:
        yield url


def client(root: str, **options: Any) -> genai.client.AsyncClient:
    return genai.Client(api_key=KEY, http_options=types.HttpOptions(
        base_url=root, **options)).aio


def config(system: str, **extra: Any) -> types.GenerateContentConfig:
    return types.GenerateContentConfig(system_instruction=system, **extra)


async def test_generate_content_answers_a_plan_on_v1(app: Starlette, root: str) -> None:
    """A planner request on /v1 gets the JSON plan, the usage and the model it named."""
    async with client(root) as gemini:
        answer = await gemini.models.generate_content(
            model="gemini-2.5-pro", contents="Plan it.\nTask: Build a CLI todo app",
            config=config(PLANNER))
    plan = json.loads(answer.text or "")
    assert [step["name"] for step in plan][:2] == ["Todo storage module",
                                                   "Command-line interface"]
    assert answer.usage_metadata is not None
    assert (answer.usage_metadata.prompt_token_count or 0) > 0
    assert answer.model_version == "gemini-2.5-pro"
    recorded = request_log(app)[-1]
    assert recorded.path == "/v1/models/gemini-2.5-pro:generateContent"
    assert recorded.headers["x-goog-api-key"] == KEY


async def test_streaming_reassembles_the_text_and_ends_with_usage(root: str) -> None:
    """A streamed answer comes in several chunks; the last has STOP and the usage."""
    async with client(root) as gemini:
        chunks = [chunk async for chunk in await gemini.models.generate_content_stream(
            model="gemini-2.5-pro", contents="Task:\nBuild a URL shortener service",
            config=config(PLANNER))]
    assert len(chunks) > 2
    plan = json.loads("".join(chunk.text or "" for chunk in chunks))
    assert [step["name"] for step in plan] == ["Design notes", "Implementation", "Tests"]
    last = chunks[-1]
    assert last.candidates is not None
    assert last.candidates[0].finish_reason == types.FinishReason.STOP
    assert last.usage_metadata is not None
    assert (last.usage_metadata.candidates_token_count or 0) > 0


async def test_function_call_round_trip(app: Starlette, root: str) -> None:
    """A coder gets a write_file call fitted to the declared tool, then a summary after it."""
    tools = [types.Tool(function_declarations=[WRITE_FILE])]
    user = types.Content(role="user", parts=[types.Part(text="Write hello.py: print hello")])
    async with client(root) as gemini:
        first = await gemini.models.generate_content(
            model="gemini-2.5-pro", contents=[user], config=config(CODER, tools=tools))
        calls = first.function_calls or []
        assert [call.name for call in calls] == ["write_file"]
        assert calls[0].args is not None
        assert calls[0].args["file_path"] == "/work/ws/hello.py"
        assert "def " in calls[0].args["content"]
        reply = types.Content(role="user", parts=[types.Part(
            function_response=types.FunctionResponse(
                id=calls[0].id, name="write_file",
                response={"output": "Successfully created and wrote to new file."}))])
        second = await gemini.models.generate_content(
            model="gemini-2.5-pro", contents=[user, first.candidates[0].content, reply],
            config=config(CODER, tools=tools))
    assert (second.text or "").startswith("[demo model] Wrote hello.py (")
    conversation = request_log(app)[-1].conversation
    assert conversation is not None
    assert [m.role for m in conversation.messages] == ["system", "user", "assistant", "tool"]


async def test_v1beta_streams_server_sent_events(root: str) -> None:
    """/v1beta with `alt=sse` and the key in the query streams `data:` events ending in STOP."""
    body = {"contents": [{"role": "user", "parts": [{"text": "Task:\nBuild a URL shortener"}]}],
            "systemInstruction": {"parts": [{"text": PLANNER}]}}
    async with httpx.AsyncClient(base_url=root) as http:
        response = await http.post(
            "/v1beta/models/gemini-2.5-pro:streamGenerateContent",
            params={"alt": "sse", "key": KEY}, json=body)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    events = [json.loads(block.removeprefix("data: "))
              for block in response.text.split("\r\n\r\n") if block]
    assert len(events) > 1
    assert events[-1]["candidates"][0]["finishReason"] == "STOP"
    assert events[-1]["usageMetadata"]["totalTokenCount"] > 0
    text = "".join(p["text"] for e in events for p in e["candidates"][0]["content"]["parts"])
    assert json.loads(text)[0]["name"] == "Design notes"


async def test_stream_without_alt_is_one_json_array(root: str) -> None:
    """Without `alt=sse`, the stream is a JSON array of response chunks."""
    body = {"contents": [{"role": "user", "parts": [{"text": "Say hi [demo:long=200]"}]}],
            "systemInstruction": {"parts": [{"text": PLANNER}]}}
    async with httpx.AsyncClient(base_url=root) as http:
        response = await http.post("/v1beta/models/m:streamGenerateContent", json=body,
                                   headers={"x-goog-api-key": KEY})
    chunks = json.loads(response.text)
    assert len(chunks) > 1
    assert len("".join(c["candidates"][0]["content"]["parts"][0]["text"] for c in chunks)) == 200


async def test_json_schema_side_call_gets_a_filled_object(app: Starlette, root: str) -> None:
    """A request with responseJsonSchema (the CLI's router) gets an object of that shape."""
    schema = {"type": "object", "properties": {
        "complexity_reasoning": {"type": "string"},
        "complexity_score": {"type": "integer", "minimum": 1, "maximum": 100}},
        "required": ["complexity_reasoning", "complexity_score"]}
    async with client(root) as gemini:
        answer = await gemini.models.generate_content(
            model="gemini-2.5-flash-lite", contents="Write hello.py: print hello",
            config=types.GenerateContentConfig(response_mime_type="application/json",
                                               response_json_schema=schema))
    assert json.loads(answer.text or "") == {"complexity_reasoning": "", "complexity_score": 1}


def test_fill_schema_covers_gemini_types() -> None:
    """Gemini's upper-case OpenAPI types, enums, arrays and nullable unions get minimal values."""
    schema = {"type": "OBJECT", "properties": {
        "choice": {"type": "STRING", "enum": ["flash", "pro"]},
        "items": {"type": "ARRAY", "items": {"type": "NUMBER"}, "minItems": 2},
        "flag": {"type": "BOOLEAN"}, "maybe": {"type": ["null", "string"]},
        "above": {"type": "integer", "exclusiveMinimum": 3}}}
    assert fill_schema(schema) == {"choice": "flash", "items": [0, 0], "flag": False,
                                   "maybe": "", "above": 4}


async def test_rate_limit_then_success(app: Starlette, root: str) -> None:
    """`times=1` makes only the first request a 429 in Google's shape; the next one answers."""
    prompt = "Task: greet [demo:status=429,retry-after=1,times=1]"
    async with client(root) as gemini:
        with pytest.raises(errors.ClientError) as raised:
            await gemini.models.generate_content(model="gemini-2.5-pro", contents=prompt,
                                                 config=config(PLANNER))
        answer = await gemini.models.generate_content(model="gemini-2.5-pro", contents=prompt,
                                                      config=config(PLANNER))
    assert raised.value.code == 429
    assert raised.value.status == "RESOURCE_EXHAUSTED"
    assert "Scripted HTTP 429" in (raised.value.message or "")
    assert json.loads(answer.text or "")[0]["name"] == "Design notes"
    assert len(request_log(app)) == 2


async def test_rate_limit_carries_retry_after_and_retry_info(root: str) -> None:
    """The 429 has a Retry-After header and a google.rpc.RetryInfo detail."""
    text = "Hi [demo:status=429,retry-after=2]"
    body = {"contents": [{"role": "user", "parts": [{"text": text}]}]}
    async with httpx.AsyncClient(base_url=root) as http:
        response = await http.post("/v1/models/m:generateContent", json=body,
                                   headers={"x-goog-api-key": KEY})
    assert response.status_code == 429
    assert response.headers["retry-after"] == "2"
    error = response.json()["error"]
    assert error["status"] == "RESOURCE_EXHAUSTED"
    assert error["details"][0]["retryDelay"] == "2s"


async def test_sdk_retry_gets_past_one_rate_limit(app: Starlette, root: str) -> None:
    """The SDK's own retry turns a single scripted 429 into a success on its second request."""
    retry = types.HttpRetryOptions(attempts=2, initial_delay=0.05, jitter=0)
    async with client(root, retry_options=retry) as gemini:
        answer = await gemini.models.generate_content(
            model="gemini-2.5-pro", contents="Task: greet [demo:status=429,retry-after=1,times=1]",
            config=config(PLANNER))
    assert json.loads(answer.text or "")[0]["name"] == "Design notes"
    assert len(request_log(app)) == 2


async def test_malformed_answer_breaks_the_sdk(root: str) -> None:
    """`[demo:malformed]` sends a body that is not JSON; the SDK cannot read it."""
    async with client(root) as gemini:
        with pytest.raises(json.JSONDecodeError):
            await gemini.models.generate_content(model="gemini-2.5-pro",
                                                 contents="Hi [demo:malformed]")


async def test_stall_leaves_a_stream_hanging_until_the_client_times_out(root: str) -> None:
    """`[demo:stall]` sends one chunk and then nothing; a client time-out ends the wait."""
    received: list[types.GenerateContentResponse] = []
    async with client(root, timeout=1_000) as gemini:
        stream = await gemini.models.generate_content_stream(
            model="gemini-2.5-pro", contents="Hi [demo:stall]")
        with pytest.raises(httpx2.ReadTimeout):
            await collect(stream, received)
    assert len(received) == 1


async def collect(stream: AsyncIterator[types.GenerateContentResponse],
                  into: list[types.GenerateContentResponse]) -> None:
    async for chunk in stream:
        into.append(chunk)


async def test_request_without_a_key_is_refused(root: str) -> None:
    """No x-goog-api-key and no ?key= gets Google's 403 PERMISSION_DENIED."""
    body = {"contents": [{"role": "user", "parts": [{"text": "Hi"}]}]}
    async with httpx.AsyncClient(base_url=root) as http:
        response = await http.post("/v1beta/models/m:generateContent", json=body)
    assert response.status_code == 403
    assert response.json()["error"]["status"] == "PERMISSION_DENIED"


async def test_count_tokens_counts_the_prompt(app: Starlette, root: str) -> None:
    """countTokens answers a positive total and is logged apart from conversations."""
    async with client(root) as gemini:
        counted = await gemini.models.count_tokens(model="gemini-2.5-pro",
                                                   contents="Write hello.py: print hello")
    assert (counted.total_tokens or 0) > 0
    assert [r.api for r in request_log(app)] == ["gemini_count_tokens"]


async def test_model_listing_is_googles_only_with_a_google_key(root: str) -> None:
    """GET /v1/models with a Google key lists Gemini models; without one it is OpenAI's."""
    async with client(root) as gemini:
        models = [model async for model in await gemini.models.list()]
    assert [model.name for model in models] == ["models/shoal-demo"]
    async with httpx.AsyncClient(base_url=root) as http:
        openai_listing = (await http.get("/v1/models")).json()
        beta = (await http.get("/v1beta/models", params={"key": KEY})).json()
    assert openai_listing["object"] == "list"
    assert beta["models"][0]["supportedGenerationMethods"][0] == "generateContent"
