"""The demo model: a scripted, deterministic model server that speaks OpenAI Chat Completions.

It is what Shoal runs against when no real model is configured, and what the tests use. It
serves `POST /v1/chat/completions` (JSON, or `text/event-stream` with tool-call deltas and a
usage chunk) and `GET /v1/models`, records every request on `app.state.requests`, and decides
each answer from the conversation alone:

- a system prompt with "Role: planner" gets a JSON array plan for the text after "Task:"
  (a todo app gets a four-step plan, anything else Design notes → Implementation → Tests);
- any other role gets one `write_file` call with real content chosen from the instructions
  ("Write todo.py: …"), then — for a test file — a `run_command` that compiles it, then a
  short summary starting with "[demo model]".

Markers in the last user message steer it: `[demo:fail]` (HTTP 500), `[demo:slow=<seconds>]`,
`[demo:invalid-plan]`, `[demo:cyclic-plan]`, `[demo:escape]` (tries to write outside the
workspace and read /etc/passwd) and `[demo:explore]` (lists the workspace, then reads the file
named by "Read <file>", else README.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import re
import shlex
import socket
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from shoal.errors import Unavailable
from shoal.testing.demo_files import (
    GENERIC_MODULE,
    GENERIC_TEST,
    GENERIC_TEST_ALONE,
    SIGNATURE,
    TODO_FILES,
)

DEMO_MODEL = "shoal-demo"
LABEL = "[demo model]"
_PIECE = 48  # characters per streamed delta, so clients really reassemble
_MAX_DELAY = 600.0


@dataclass(frozen=True, slots=True)
class DemoToolCall:
    """A tool call the demo model makes."""

    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True, slots=True)
class DemoReply:
    """What the demo model answers to one request."""

    text: str = ""
    tool_calls: tuple[DemoToolCall, ...] = ()
    error: str | None = None  # answered as HTTP 500
    delay: float = 0.0


@dataclass(frozen=True, slots=True)
class _Turn:
    """The parts of a conversation the script looks at."""

    instructions: str
    planner: bool
    done_steps: int
    tool_results: list[str] = field(default_factory=list)


# ---- the script (pure) ------------------------------------------------------------------


def decide_reply(messages: Sequence[Mapping[str, Any]]) -> DemoReply:
    """Decide the demo model's answer to a conversation. Pure and deterministic."""
    turn = _read_turn(messages)
    text = turn.instructions
    slow = re.search(r"\[demo:slow=([0-9]+(?:\.[0-9]+)?)\]", text)
    delay = min(float(slow.group(1)), _MAX_DELAY) if slow else 0.0
    if "[demo:fail]" in text:
        return DemoReply(error=f"{LABEL} Scripted failure: the instructions contain "
                         "[demo:fail]. Remove that marker to get an answer.", delay=delay)
    reply = _plan_reply(text) if turn.planner else _worker_reply(turn)
    return DemoReply(reply.text, reply.tool_calls, delay=delay)


def _read_turn(messages: Sequence[Mapping[str, Any]]) -> _Turn:
    users = [_text(m.get("content")) for m in messages if m.get("role") == "user"]
    systems = [_text(m.get("content")) for m in messages
               if m.get("role") in ("system", "developer")]
    return _Turn(
        instructions=users[-1] if users else "",
        planner=any("Role: planner" in s for s in systems),
        done_steps=sum(1 for m in messages if m.get("role") == "assistant" and m.get("tool_calls")),
        tool_results=[_text(m.get("content")) for m in messages if m.get("role") == "tool"],
    )


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: [{"type": "text", "text": …}, …]
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def _plan_reply(instructions: str) -> DemoReply:
    if "[demo:invalid-plan]" in instructions:
        return DemoReply(text=f"{LABEL} A plan, in prose on purpose ([demo:invalid-plan]): "
                         "first design it, then build it, then test it.")
    task = task_description(instructions)
    if "[demo:cyclic-plan]" in instructions:
        plan = _cyclic_plan(task)
    elif "todo" in task.lower():
        plan = _TODO_PLAN
    else:
        plan = _generic_plan(task)
    return DemoReply(text=json.dumps(plan, indent=2))


def task_description(prompt: str) -> str:
    """The task in a planner prompt: the paragraph after the first "Task:" line."""
    found = re.search(r"^[ \t]*Task:[ \t]*", prompt, flags=re.MULTILINE)
    rest = prompt[found.end():] if found else prompt
    paragraph = rest.lstrip("\n").split("\n\n", 1)[0]
    return " ".join(paragraph.split()) or "the task"


def _step(name: str, description: str, dependencies: list[int],
          complexity: int) -> dict[str, Any]:
    return {"name": name, "description": description, "dependencies": dependencies,
            "recommended_tool": "openai_compat", "complexity": complexity}


_TODO_PLAN = [
    _step("Todo storage module", "Write todo.py: a TodoList class with add/complete/remove/list "
          "and JSON load/save.", [], 2),
    _step("Command-line interface", "Write cli.py: argparse commands add/done/rm/ls using "
          "todo.py.", [0], 2),
    _step("Tests", "Write test_todo.py: pytest tests for todo.py.", [0], 2),
    _step("README", "Write README.md with usage of the todo CLI.", [], 1),
]


def _generic_plan(task: str) -> list[dict[str, Any]]:
    module = _slug(task)
    return [
        _step("Design notes", f"Write DESIGN.md: design notes for: {task}", [], 1),
        _step("Implementation", f"Write {module}.py: implement {task}", [0], 3),
        _step("Tests", f"Write test_{module}.py: pytest tests for {module}.py.", [1], 2),
    ]


def _cyclic_plan(task: str) -> list[dict[str, Any]]:
    return [
        _step("First half", f"Write part_a.py: half of {task}", [1], 2),
        _step("Second half", f"Write part_b.py: the other half of {task}", [0], 2),
    ]


_STOPWORDS = {"a", "an", "the", "build", "create", "make", "write", "implement", "simple",
              "small", "tiny", "with", "and", "for", "of", "to", "in", "that", "some", "my"}


def _slug(text: str) -> str:
    words = [w for w in re.findall(r"[a-z][a-z0-9]*", text.lower()) if w not in _STOPWORDS]
    return "_".join(words[:3]) or "project"


def _worker_reply(turn: _Turn) -> DemoReply:
    steps = _worker_steps(turn.instructions)
    if turn.done_steps < len(steps):
        return DemoReply(tool_calls=(steps[turn.done_steps],))
    return DemoReply(text=_summary(steps, turn.tool_results))


def _worker_steps(instructions: str) -> list[DemoToolCall]:
    if "[demo:escape]" in instructions:
        return [DemoToolCall("write_file", {"path": "../escape.txt", "content": "escaped\n"}),
                DemoToolCall("read_file", {"path": "/etc/passwd"})]
    if "[demo:explore]" in instructions:
        named = re.search(r"\bread\s+`?([\w./-]+\.[A-Za-z0-9]+)", instructions, re.IGNORECASE)
        return [DemoToolCall("list_files", {"path": "."}),
                DemoToolCall("read_file", {"path": named.group(1) if named else "README.md"})]
    path = _target_file(instructions)
    steps = [DemoToolCall("write_file", {"path": path, "content": _content(path, instructions)})]
    if path.endswith(".py") and path.rsplit("/", 1)[-1].startswith("test_"):
        code = f"compile(open({path!r}).read(), {path!r}, 'exec'); print({path!r}, 'compiles')"
        steps.append(DemoToolCall("run_command", {"command": f"python3 -c {shlex.quote(code)}"}))
    return steps


def _target_file(instructions: str) -> str:
    """The file the instructions ask for ("Write cli.py: …"), or one named after them."""
    named = re.search(r"\bwrite\s+`?([A-Za-z0-9_][\w./-]*\.[A-Za-z0-9]+)\b", instructions,
                      flags=re.IGNORECASE)
    if named and ".." not in named.group(1):
        return named.group(1)
    first_line = instructions.strip().split("\n", 1)[0]
    lowered = instructions.lower()
    if "test" in lowered:
        return f"test_{_slug(first_line)}.py"
    if any(word in lowered for word in ("python", "code", "implement", "function", "script")):
        return f"{_slug(first_line)}.py"
    return f"{_slug(first_line)}.md"


def _content(path: str, instructions: str) -> str:
    if path in TODO_FILES and "todo" in instructions.lower():
        return TODO_FILES[path]
    name = path.rsplit("/", 1)[-1]
    stem = name.rsplit(".", 1)[0]
    if name.endswith(".py") and name.startswith("test_"):
        module = stem.removeprefix("test_")
        if module.isidentifier():
            return GENERIC_TEST.format(module=module)
        return GENERIC_TEST_ALONE
    if name.endswith(".py"):
        return GENERIC_MODULE.format(title=stem.replace("_", " "), text=instructions)
    if name.endswith(".json"):
        return json.dumps({"description": instructions, "written_by": LABEL}, indent=2) + "\n"
    return f"# {stem.replace('_', ' ').title()}\n\n{instructions.strip()}\n\n_{SIGNATURE}_\n"


def _summary(steps: list[DemoToolCall], results: list[str]) -> str:
    if steps[0].name != "write_file" or steps[0].arguments["path"] == "../escape.txt":
        return f"{LABEL} The tools answered: " + " | ".join(
            r.strip().split("\n", 1)[0] for r in results)
    written = steps[0].arguments
    size = len(str(written["content"]).encode("utf-8"))
    text = f"{LABEL} Wrote {written['path']} ({size} bytes)."
    if results and results[0].startswith("Error"):
        text = f"{LABEL} Could not write {written['path']}: {results[0].strip()}"
    if len(steps) > 1 and len(results) > 1:
        said = [line.strip() for line in results[-1].splitlines()
                if line.strip() and not line.startswith("---")]
        text += f" Checked that it compiles: {'; '.join(said[:2])}."
    return text


# ---- the HTTP server --------------------------------------------------------------------


def create_demo_model_app() -> Starlette:
    """The demo model as an ASGI app; `app.state.requests` holds every request body."""
    app = Starlette(routes=[
        Route("/v1/chat/completions", _chat_completions, methods=["POST"]),
        Route("/v1/models", _models, methods=["GET"]),
    ])
    app.state.requests = []
    app.state.ids = itertools.count(1)
    return app


def recorded_requests(app: Starlette) -> list[dict[str, Any]]:
    """The chat-completion request bodies `app` has received, oldest first."""
    requests: list[dict[str, Any]] = app.state.requests
    return requests


async def _models(request: Request) -> Response:
    return JSONResponse({"object": "list", "data": [
        {"id": DEMO_MODEL, "object": "model", "created": 0, "owned_by": "shoal"}]})


async def _chat_completions(request: Request) -> Response:
    try:
        body = await request.json()
    except ValueError:
        return _error(400, "The request body is not JSON. Send a Chat Completions request.")
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
        return _error(400, "`messages` must be a list of chat messages.")
    recorded_requests(request.app).append(body)
    reply = decide_reply([m for m in body["messages"] if isinstance(m, dict)])
    if reply.delay and await _client_left_during(request, reply.delay):
        return Response(status_code=499)  # nobody is listening any more
    if reply.error is not None:
        return _error(500, reply.error, kind="server_error", code="demo_failure")
    number = next(request.app.state.ids)
    usage = _usage(body["messages"], reply)
    if body.get("stream"):
        options = body.get("stream_options") or {}
        chunks = _chunks(reply, number, usage if options.get("include_usage") else None)
        return StreamingResponse(chunks, media_type="text/event-stream")
    return JSONResponse(_completion(reply, number, usage))


async def _client_left_during(request: Request, seconds: float) -> bool:
    """Wait `seconds`, unless the client hangs up first (then say so).

    The body has been read, so the next ASGI message can only be the disconnect.
    """
    try:
        async with asyncio.timeout(seconds):
            while (await request.receive())["type"] != "http.disconnect":
                pass
    except TimeoutError:
        return False
    return True


def _error(status: int, message: str, *, kind: str = "invalid_request_error",
           code: str | None = None) -> Response:
    # `x-should-retry: false` stops the OpenAI SDKs from retrying a scripted failure.
    return JSONResponse(
        {"error": {"message": message, "type": kind, "param": None, "code": code}},
        status_code=status, headers={"x-should-retry": "false"})


def _usage(messages: list[Any], reply: DemoReply) -> dict[str, int]:
    prompt = max(1, len(json.dumps(messages)) // 4)
    answer = reply.text + "".join(json.dumps(c.arguments) for c in reply.tool_calls)
    completion = max(1, len(answer) // 4)
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion}


def _wire_calls(reply: DemoReply, number: int) -> list[dict[str, Any]]:
    return [{"id": f"call_demo_{number}_{i}", "type": "function",
             "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
            for i, c in enumerate(reply.tool_calls)]


def _completion(reply: DemoReply, number: int, usage: dict[str, int]) -> dict[str, Any]:
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


async def _chunks(
    reply: DemoReply, number: int, usage: dict[str, int] | None
) -> AsyncIterator[str]:
    base = {"id": f"chatcmpl-demo-{number}", "object": "chat.completion.chunk",
            "created": int(time.time()), "model": DEMO_MODEL}

    def event(delta: dict[str, Any], finish: str | None = None) -> str:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return f"data: {json.dumps({**base, 'choices': [choice]})}\n\n"

    yield event({"role": "assistant", "content": ""})
    for piece in _pieces(reply.text):
        yield event({"content": piece})
    for index, call in enumerate(_wire_calls(reply, number)):
        yield event({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                     "function": {"name": call["function"]["name"],
                                                  "arguments": ""}}]})
        for piece in _pieces(call["function"]["arguments"]):
            yield event({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    yield event({}, "tool_calls" if reply.tool_calls else "stop")
    if usage is not None:
        yield f"data: {json.dumps({**base, 'choices': [], 'usage': usage})}\n\n"
    yield "data: [DONE]\n\n"


def _pieces(text: str) -> Iterator[str]:
    for start in range(0, len(text), _PIECE):
        yield text[start:start + _PIECE]


# ---- running it -------------------------------------------------------------------------


class _Server(uvicorn.Server):
    """uvicorn's server, plus an event for "listening" and optional signal handling."""

    def __init__(self, config: uvicorn.Config, *, handle_signals: bool) -> None:
        super().__init__(config)
        self.ready = asyncio.Event()
        self._handle_signals = handle_signals

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        self.ready.set()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if not self._handle_signals:  # in-process use (tests): leave the host's handlers alone
            yield
            return
        with super().capture_signals():
            yield


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise Unavailable(
            f"The demo model cannot listen on {host}:{port}: {exc.strerror or exc}. Pick "
            "another port (or 0 for any free one), or stop what is using this one.",
            details={"host": host, "port": port},
        ) from exc
    return sock


@contextlib.asynccontextmanager
async def _serving(
    app: Starlette, sock: socket.socket, *, handle_signals: bool, log_level: str
) -> AsyncIterator[tuple[str, asyncio.Task[None]]]:
    host, port = sock.getsockname()[:2]
    url_host = f"[{host}]" if ":" in host else host
    config = uvicorn.Config(app, log_level=log_level, log_config=None, lifespan="off",
                            ws="none", access_log=False, timeout_graceful_shutdown=5)
    server = _Server(config, handle_signals=handle_signals)
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    serving.add_done_callback(lambda _: server.ready.set())
    try:
        await server.ready.wait()
        if serving.done():
            serving.result()  # re-raises a startup error
            raise Unavailable("The demo model stopped while starting. See the log above.")
        yield f"http://{url_host}:{port}/v1", serving
    finally:
        server.should_exit = True
        await serving


@contextlib.asynccontextmanager
async def running_demo_model(
    app: Starlette | None = None, *, host: str = "127.0.0.1", port: int = 0
) -> AsyncIterator[str]:
    """Run the demo model in this process (port 0: any free port); yield its base URL.

    The URL ends in `/v1`, ready for `openai.AsyncOpenAI(base_url=…)`. Pass your own `app`
    (from `create_demo_model_app`) to read its recorded requests.
    """
    with _bind(host, port) as sock:
        async with _serving(app or create_demo_model_app(), sock, handle_signals=False,
                            log_level="warning") as (base_url, _):
            yield base_url


async def serve_demo_model(host: str, port: int) -> None:
    """Serve the demo model on `host:port` until cancelled or interrupted (Ctrl-C)."""
    with _bind(host, port) as sock:
        async with _serving(create_demo_model_app(), sock, handle_signals=True,
                            log_level="info") as (base_url, serving):
            logging.getLogger("shoal.demo_model").info(
                "Demo model (scripted, not a real model) at %s — model name %r.",
                base_url, DEMO_MODEL)
            await asyncio.shield(serving)  # shielded: a cancellation shuts down gracefully
