"""Shoal's own agent loop over the OpenAI Chat Completions protocol.

`OpenAICompatTool` talks to any OpenAI-compatible server (OpenAI, vLLM, Ollama's `/v1`,
llama.cpp, the bundled demo model) through the official `openai` SDK. It streams each answer,
offers four workspace tools (`read_file`, `write_file`, `list_files`, `run_command`), runs the
calls the model makes, and loops until the model answers without a tool call. Every path the
model gives is checked with `resolve_inside`: a bad one comes back to the model as an error.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import openai
from openai.types.chat import (
    ChatCompletionAssistantMessageParam,
    ChatCompletionFunctionToolParam,
    ChatCompletionMessageParam,
)
from openai.types.chat.chat_completion_chunk import ChoiceDeltaToolCall
from openai.types.completion_usage import CompletionUsage

from shoal.artifacts.paths import resolve_inside
from shoal.errors import ToolError, UnsafePath
from shoal.protocol import Usage
from shoal.tools.base import ToolOutcome, ToolRun
from shoal.worker.process import run_command

MAX_READ_BYTES = 200_000
MAX_COMMAND_OUTPUT = 20_000  # characters of each stream the model gets back (the tail)
MAX_LISTED_FILES = 1_000
_SECRET_MARKERS = ("API_KEY", "TOKEN", "SECRET", "PASSWORD")

SYSTEM_PROMPT = """\
You are Shoal's {role} agent. Role: {role}.

You work alone in a private workspace folder. Every path is relative to the workspace; \
absolute paths and paths with '..' are refused.

Tools:
- read_file(path): read a text file.
- write_file(path, content): create or replace a file with its complete content.
- list_files(path="."): list the files under a folder of the workspace.
- run_command(command): run a shell command in the workspace (at most {timeout:g} s); \
you get its exit code and the end of its output.

Use the tools to do the work. When you are done, answer without a tool call: a short \
summary of what you did. That answer is your result."""


def _function(name: str, description: str, properties: dict[str, Any],
              required: list[str]) -> ChatCompletionFunctionToolParam:
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "properties": properties, "required": required,
                       "additionalProperties": False}}}


_PATH = {"type": "string", "description": "A path relative to the workspace."}
TOOLS: list[ChatCompletionFunctionToolParam] = [
    _function("read_file", "Read a text file of the workspace.", {"path": _PATH}, ["path"]),
    _function("write_file", "Create or replace a file of the workspace with this content.",
              {"path": _PATH, "content": {"type": "string"}}, ["path", "content"]),
    _function("list_files", "List the files under a folder of the workspace.",
              {"path": {**_PATH, "default": "."}}, []),
    _function("run_command", "Run a shell command in the workspace; returns the exit code "
              "and the end of the output.", {"command": {"type": "string"}}, ["command"]),
]


@dataclass
class _Tokens:
    input: int = 0
    output: int = 0

    def add(self, usage: CompletionUsage) -> None:
        self.input += usage.prompt_tokens or 0
        self.output += usage.completion_tokens or 0

    def usage(self) -> Usage:
        return Usage(input_tokens=self.input, output_tokens=self.output)


@dataclass
class _Call:
    """One tool call, assembled from the pieces a stream delivers."""

    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class _Reply:
    text: str
    calls: list[_Call]


class _LineLog:
    """Turns streamed text into whole lines for `run.log`."""

    def __init__(self, log: Callable[[str], None]) -> None:
        self._log = log
        self._partial = ""

    def feed(self, text: str) -> None:
        *lines, self._partial = (self._partial + text).split("\n")
        for line in lines:
            self._emit(line)

    def flush(self) -> None:
        self._emit(self._partial)
        self._partial = ""

    def _emit(self, line: str) -> None:
        if line.strip():
            self._log(line.rstrip())


class _BadArguments(Exception):
    """The model called a tool with arguments it cannot use."""


def is_local_url(base_url: str) -> bool:
    """True when `base_url` names this machine or a private-network address."""
    host = urlsplit(base_url).hostname or ""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_private


class OpenAICompatTool:
    """An agent loop against any OpenAI-compatible Chat Completions server."""

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str,
        model: str,
        name: str = "openai_compat",
        local: bool | None = None,
        max_turns: int = 24,
        command_timeout: float = 120.0,
        version: str | None = None,
        max_retries: int = 2,
        request_timeout: float = 600.0,
    ) -> None:
        self.base_url = base_url
        self.api_key = api_key
        self.model = model
        self.name = name
        self.local = is_local_url(base_url) if local is None else local
        self.max_turns = max_turns
        self.command_timeout = command_timeout
        self.version = version or f"openai-python {openai.__version__}"
        self.max_retries = max_retries
        self.request_timeout = request_timeout
        self._handlers: dict[str, Callable[[ToolRun, dict[str, Any]], Awaitable[str]]] = {
            "read_file": self._read_file, "write_file": self._write_file,
            "list_files": self._list_files, "run_command": self._run_command,
        }

    async def run(self, run: ToolRun) -> ToolOutcome:
        """Converse with the model until it answers without a tool call, or turns run out."""
        tokens = _Tokens()
        try:
            async with openai.AsyncOpenAI(
                base_url=self.base_url,
                api_key=self.api_key or "none",  # local servers often need none; the SDK does
                max_retries=self.max_retries,
                timeout=self.request_timeout,
            ) as client:
                return await self._converse(client, run, tokens)
        except openai.OpenAIError as exc:
            error = self.describe_error(exc)
            run.log(f"error: {error}")
            return ToolOutcome(status="failed", usage=tokens.usage(), error=error)

    async def _converse(
        self, client: openai.AsyncOpenAI, run: ToolRun, tokens: _Tokens
    ) -> ToolOutcome:
        system = SYSTEM_PROMPT.format(role=run.role, timeout=self.command_timeout)
        messages: list[ChatCompletionMessageParam] = [
            {"role": "system", "content": system},
            {"role": "user", "content": run.instructions},
        ]
        reply = _Reply("", [])
        for turn in range(1, self.max_turns + 1):
            reply = await self._complete(client, messages, run, tokens, turn=turn)
            messages.append(_assistant_message(reply))
            if not reply.calls:
                return ToolOutcome(status="succeeded", output=reply.text, usage=tokens.usage())
            for call in reply.calls:
                result = await self._call_tool(run, call)
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
        return ToolOutcome(
            status="failed", output=reply.text, usage=tokens.usage(),
            error=f"The agent ({self.model} at {self.base_url}) was still calling tools after "
                  f"{self.max_turns} turns, so Shoal stopped it. Split the subtask into smaller "
                  "ones, or raise the limit with SHOAL_AGENT_MAX_TURNS.",
        )

    async def _complete(
        self,
        client: openai.AsyncOpenAI,
        messages: list[ChatCompletionMessageParam],
        run: ToolRun,
        tokens: _Tokens,
        *,
        turn: int,
    ) -> _Reply:
        """Stream one answer: log its text line by line and assemble its tool calls."""
        stream = await client.chat.completions.create(
            model=self.model, messages=messages, tools=TOOLS, stream=True,
            stream_options={"include_usage": True},
        )
        text: list[str] = []
        calls: dict[int, _Call] = {}
        lines = _LineLog(run.log)
        async with stream:
            async for chunk in stream:
                if chunk.usage is not None:
                    tokens.add(chunk.usage)
                for choice in chunk.choices:
                    if choice.delta.content:
                        text.append(choice.delta.content)
                        lines.feed(choice.delta.content)
                    _absorb_tool_calls(calls, choice.delta.tool_calls or [])
        lines.flush()
        ordered = [calls[index] for index in sorted(calls)]
        for index, call in enumerate(ordered):
            call.id = call.id or f"call_{turn}_{index}"
        return _Reply("".join(text), ordered)

    async def _call_tool(self, run: ToolRun, call: _Call) -> str:
        """Run one tool call; whatever goes wrong is told to the model, not raised."""
        handler = self._handlers.get(call.name)
        if handler is None:
            run.log(f"{call.name or '(unnamed)'}: no such tool")
            return (f"Error: there is no tool named {call.name!r}. "
                    f"Use one of: {', '.join(self._handlers)}.")
        try:
            arguments = _parse_arguments("".join(call.arguments))
            return await handler(run, arguments)
        except _BadArguments as exc:
            run.log(f"{call.name}: bad arguments ({exc})")
            return f"Error: {call.name} was called with bad arguments: {exc}"
        except UnsafePath as exc:
            path = exc.details.get("path") if isinstance(exc.details, dict) else None
            run.log(f"{call.name} {path!r} refused: {exc.message}")
            return (f"Error: the path {path!r} was refused: {exc.message} Use a path relative "
                    "to the workspace, without '..'. Nothing was read or written.")
        except (ToolError, OSError) as exc:
            message = exc.message if isinstance(exc, ToolError) else _os_message(exc)
            run.log(f"{call.name} failed: {message}")
            return f"Error: {call.name} failed: {message}"

    async def _read_file(self, run: ToolRun, args: dict[str, Any]) -> str:
        path = _text_argument(args, "path")
        target = resolve_inside(run.workspace, path)
        size, text = await asyncio.to_thread(_read_text, target)
        run.log(f"read_file {path} ({size} bytes)")
        return text

    async def _write_file(self, run: ToolRun, args: dict[str, Any]) -> str:
        path = _text_argument(args, "path")
        data = _text_argument(args, "content", allow_empty=True).encode("utf-8")
        target = resolve_inside(run.workspace, path)
        await asyncio.to_thread(_write_bytes, target, data)
        run.log(f"write_file {path} ({len(data)} bytes)")
        return f"Wrote {path} ({len(data)} bytes)."

    async def _list_files(self, run: ToolRun, args: dict[str, Any]) -> str:
        path = str(args.get("path") or ".").strip()
        root = run.workspace.resolve()
        folder = root if path in ("", ".", "./") else resolve_inside(run.workspace, path)
        listing = await asyncio.to_thread(_list_tree, root, folder)
        run.log(f"list_files {path}")
        return listing

    async def _run_command(self, run: ToolRun, args: dict[str, Any]) -> str:
        command = _text_argument(args, "command")
        run.log(f"run_command {command}")
        result = await run_command(
            command, cwd=run.workspace, timeout=self.command_timeout, shell=True,
            env=_command_env(), on_line=lambda line: run.log(f"  {line}"),
            max_output=MAX_COMMAND_OUTPUT,
        )
        if result.timed_out:
            head = (f"The command did not finish within {self.command_timeout:g} s and was "
                    "stopped. Run something quicker, or split it into steps.")
        else:
            head = f"exit code: {result.exit_code}"
        run.log(f"  → {head}")
        return f"{head}\n--- stdout ---\n{result.stdout}\n--- stderr ---\n{result.stderr}"

    def describe_error(self, exc: openai.OpenAIError) -> str:
        """Say what went wrong talking to the model server, and what to do about it."""
        server = f"The model server at {self.base_url}"
        if isinstance(exc, openai.APITimeoutError):
            return (f"{server} did not answer within {self.request_timeout:g} s. Check that it "
                    f"is not overloaded, or use a faster model than {self.model!r}.")
        if isinstance(exc, openai.APIConnectionError):
            cause = f" ({exc.__cause__})" if exc.__cause__ else ""
            return (f"{server} cannot be reached{cause}. Start that server (the bundled demo: "
                    "`shoal demo-model`) or point SHOAL_OPENAI_COMPAT_BASE_URL at one that runs.")
        if not isinstance(exc, openai.APIStatusError):
            return (f"{server} sent an answer Shoal could not use: {exc}. Check that it speaks "
                    "the OpenAI Chat Completions protocol with streaming.")
        said = f"HTTP {exc.status_code}: {_server_message(exc)}"
        if exc.status_code in (401, 403):
            return (f"{server} refused the API key ({said}). Set SHOAL_OPENAI_COMPAT_API_KEY "
                    "to a key it accepts.")
        if exc.status_code == 404:
            return (f"{server} does not know model {self.model!r} or the path ({said}). Check "
                    "SHOAL_OPENAI_COMPAT_MODEL, and that the base URL ends in /v1.")
        if exc.status_code == 429:
            return (f"{server} is rate limiting ({said}). Wait and retry, or run fewer "
                    "attempts at once.")
        if exc.status_code >= 500:
            return (f"{server} failed ({said}). This is a server-side error: check that "
                    "server's logs, then retry.")
        return (f"{server} rejected the request ({said}). Check that model {self.model!r} "
                "supports streaming and tool (function) calls.")


def _absorb_tool_calls(calls: dict[int, _Call], deltas: list[ChoiceDeltaToolCall]) -> None:
    """Merge streamed tool-call pieces: the id and name come once, arguments in parts."""
    for delta in deltas:
        call = calls.setdefault(delta.index, _Call())
        if delta.id and not call.id:
            call.id = delta.id
        if delta.function is None:
            continue
        if delta.function.name and not call.name:
            call.name = delta.function.name
        if delta.function.arguments:
            call.arguments.append(delta.function.arguments)


def _assistant_message(reply: _Reply) -> ChatCompletionAssistantMessageParam:
    message: ChatCompletionAssistantMessageParam = {
        "role": "assistant", "content": reply.text or None}
    if reply.calls:
        message["tool_calls"] = [
            {"id": call.id, "type": "function",
             "function": {"name": call.name, "arguments": "".join(call.arguments) or "{}"}}
            for call in reply.calls
        ]
    return message


def _parse_arguments(raw: str) -> dict[str, Any]:
    try:
        value = json.loads(raw) if raw.strip() else {}
    except json.JSONDecodeError as exc:
        raise _BadArguments(f"they are not valid JSON ({exc.msg} at position {exc.pos}). "
                            "Send one JSON object.") from exc
    if not isinstance(value, dict):
        raise _BadArguments("they must be one JSON object.")
    return value


def _text_argument(args: dict[str, Any], key: str, *, allow_empty: bool = False) -> str:
    value = args.get(key)
    if not isinstance(value, str) or (not allow_empty and not value.strip()):
        raise _BadArguments(f"{key!r} must be a non-empty string." if not allow_empty
                            else f"{key!r} must be a string.")
    return value


def _read_text(target: Path) -> tuple[int, str]:
    if not target.is_file():
        raise ToolError(f"there is no file {target.name!r} there. Call list_files to see what "
                        "exists.")
    size = target.stat().st_size
    with target.open("rb") as handle:
        data = handle.read(MAX_READ_BYTES)
    text = data.decode("utf-8", errors="replace")
    if size > MAX_READ_BYTES:
        text += f"\n[… the file has {size} bytes; only the first {MAX_READ_BYTES} are shown]"
    return size, text


def _write_bytes(target: Path, data: bytes) -> None:
    if target.is_dir():
        raise ToolError("that path is a folder. Give the path of a file.")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)


def _list_tree(root: Path, folder: Path) -> str:
    if not folder.is_dir():
        raise ToolError("that path is not a folder. Call list_files without a path.")
    entries: list[str] = []
    for current, dirs, files in os.walk(folder):  # does not follow symlinked folders
        dirs.sort()
        for name in sorted(files):
            file = Path(current) / name
            size = file.lstat().st_size
            entries.append(f"{file.relative_to(root).as_posix()} ({size} bytes)")
            if len(entries) >= MAX_LISTED_FILES:
                entries.append(f"[… stopped after {MAX_LISTED_FILES} files]")
                return "\n".join(entries)
    return "\n".join(entries) or "(no files)"


def _command_env() -> dict[str, str]:
    """The worker's environment without its secrets: commands come from a model."""
    return {key: value for key, value in os.environ.items()
            if not key.startswith("SHOAL_")
            and not any(marker in key.upper() for marker in _SECRET_MARKERS)}


def _server_message(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        return str(body["message"])
    return exc.message


def _os_message(exc: OSError) -> str:
    return f"{exc.strerror or exc}" + (f" ({exc.filename})" if exc.filename else "")
