"""Shoal's own agent loop: any model API, four workspace tools, retries and a journal.

`AgentLoopTool` converses with a model through a `ModelClient` (OpenAI Chat Completions —
OpenAI itself and any OpenAI-compatible server —, Anthropic, Gemini, Ollama; see
`shoal.tools.models`). It streams each answer, offers four workspace tools (`read_file`,
`write_file`, `list_files`, `run_command`), runs the calls the model makes, and loops until
the model answers without a tool call.

- Every path the model gives is checked with `resolve_inside`, and every edit and command
  with the task's `PermissionPolicy`: a refusal comes back to the model as an error and is
  reported in the log and the outcome.
- Model calls that fail with 429, 5xx, a time-out or a dropped connection are retried with
  exponential backoff and full jitter, waiting at least what `Retry-After` asks.
- Each model call is journalled on the worker's disk (request hash → answer, usage). A later
  attempt of the same subtask that sends the same request gets the journalled answer instead
  of paying for it again; its tools still run for real, so the workspace is rebuilt.
- When the attempt is traced (`ToolRun.trace`), each model request is a span under the
  attempt's, with its tokens and cost (`shoal.tracing`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import ipaddress
import json
import os
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import openai
from mcp import MCPError as McpError

from shoal.artifacts.paths import resolve_inside
from shoal.errors import ShoalError, ToolError, UnsafePath
from shoal.process import run_command
from shoal.protocol import McpServer, Usage
from shoal.tools import mcp_config
from shoal.tools.base import ToolOutcome, ToolRun
from shoal.tools.journal import Journal
from shoal.tools.mcp_config import McpTools
from shoal.tools.models.base import ModelAnswer, ModelClient, ModelError, ToolDef, Turn
from shoal.tools.permissions import Denial, PermissionPolicy
from shoal.tools.pricing import with_cost

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

{mcp}Use the tools to do the work. When you are done, answer without a tool call: a short \
summary of what you did. That answer is your result."""


def _function(name: str, description: str, properties: dict[str, Any],
              required: list[str]) -> ToolDef:
    return ToolDef(name, description, {
        "type": "object", "properties": properties, "required": required,
        "additionalProperties": False})


_PATH = {"type": "string", "description": "A path relative to the workspace."}
TOOLS: list[ToolDef] = [
    _function("read_file", "Read a text file of the workspace.", {"path": _PATH}, ["path"]),
    _function("write_file", "Create or replace a file of the workspace with this content.",
              {"path": _PATH, "content": {"type": "string"}}, ["path", "content"]),
    _function("list_files", "List the files under a folder of the workspace.",
              {"path": {**_PATH, "default": "."}}, []),
    _function("run_command", "Run a shell command in the workspace; returns the exit code "
              "and the end of the output.", {"command": {"type": "string"}}, ["command"]),
]


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How model calls are retried: `max_retries` more tries, backoff doubling from `base`
    up to `cap` seconds with full jitter, never sooner than the server's `Retry-After`."""

    max_retries: int = 4
    base: float = 1.0
    cap: float = 60.0

    def delay(self, retry: int, retry_after: float | None) -> float:
        backoff = random.uniform(0, min(self.cap, self.base * 2 ** (retry - 1)))
        return max(backoff, retry_after or 0.0)


@dataclass
class _Tokens:
    input: int = 0
    output: int = 0
    replayed: int = 0

    def add(self, usage: Usage) -> None:
        self.input += usage.input_tokens
        self.output += usage.output_tokens

    def usage(self) -> Usage:
        return Usage(input_tokens=self.input, output_tokens=self.output)


class _LineLog:
    """Turns streamed text into whole lines for `run.log`, and passes each piece on as it
    comes to `stream` (the live `agent_token` events), when someone watches."""

    def __init__(self, log: Callable[[str], None],
                 stream: Callable[[str], None] | None = None) -> None:
        self._log = log
        self._stream = stream
        self._partial = ""

    def feed(self, text: str) -> None:
        if self._stream is not None:
            self._stream(text)
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


class _Refused(Exception):
    """The permission policy refused a call."""

    def __init__(self, denial: Denial) -> None:
        super().__init__(denial.reason)
        self.denial = denial


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


@dataclass
class _Conversation:
    run: ToolRun
    client: ModelClient
    journal: Journal
    policy: PermissionPolicy
    tokens: _Tokens = field(default_factory=_Tokens)
    turns: list[Turn] = field(default_factory=list)
    denials: list[Denial] = field(default_factory=list)
    tools: list[ToolDef] = field(default_factory=lambda: list(TOOLS))
    mcp: McpTools | None = None  # the tools of the role's MCP servers, when it has some


class AgentLoopTool:
    """Shoal's agent loop over one model API."""

    def __init__(
        self,
        *,
        name: str,
        client: Callable[[], ModelClient],
        local: bool,
        version: str | None = None,
        max_turns: int = 24,
        command_timeout: float = 120.0,
        retry: RetryPolicy | None = None,
        journal_dir: Path | None = None,
    ) -> None:
        self.name = name
        self.local = local
        self.version = version
        self.max_turns = max_turns
        self.command_timeout = command_timeout
        self.retry = retry or RetryPolicy()
        self.journal_dir = journal_dir
        self._client = client
        self._handlers: dict[str, Callable[[_Conversation, dict[str, Any]],
                                           Awaitable[str]]] = {
            "read_file": self._read_file, "write_file": self._write_file,
            "list_files": self._list_files, "run_command": self._run_command,
        }

    async def run(self, run: ToolRun) -> ToolOutcome:
        """Converse with the model until it answers without a tool call, or turns run out."""
        try:
            policy = PermissionPolicy.from_options(run.options)
        except ShoalError as exc:
            return ToolOutcome(status="failed", error=exc.message)
        client = self._client()
        if run.trace is not None:
            run.trace.note_model(client.model)
        chat = _Conversation(run, client, Journal.open(self.journal_dir, run.subtask_id),
                             policy)
        servers, refused = mcp_config.allowed(run, policy)
        chat.denials.extend(refused)
        try:
            outcome = await self._with_mcp(chat, servers)
        except ModelError as exc:
            run.log(f"error: {exc.message}")
            outcome = ToolOutcome(status="failed", usage=chat.tokens.usage(),
                                  error=exc.message)
        finally:
            await client.aclose()
        if chat.tokens.replayed:
            run.log(f"journal: {chat.tokens.replayed} model call(s) replayed from an earlier "
                    "attempt, not paid for again")
        if outcome.status == "succeeded":
            chat.journal.discard()
        outcome = dataclasses.replace(outcome, usage=with_cost(outcome.usage, client.model))
        return _with_denials(outcome, chat.denials)

    async def _with_mcp(self, chat: _Conversation, servers: list[McpServer]) -> ToolOutcome:
        """Converse, with the tools of `servers` offered too while they run."""
        if not servers:
            return await self._converse(chat)
        names = ", ".join(s.name for s in servers)
        try:
            async with mcp_config.connected(servers, chat.run.workspace) as tools:
                chat.mcp, chat.tools = tools, [*TOOLS, *tools.defs]
                chat.run.log(f"mcp: {names} ({len(tools.defs)} tools)")
                return await self._converse(chat)
        except (OSError, McpError, ExceptionGroup) as exc:
            message = f"The MCP server(s) {names} could not be used: {exc}"
            chat.run.log(f"error: {message}")
            return ToolOutcome(status="failed", usage=chat.tokens.usage(), error=message)

    async def _converse(self, chat: _Conversation) -> ToolOutcome:
        run = chat.run
        mcp = ("Tools of MCP servers, named <server>__<tool>, are offered too: use them as "
               "their descriptions say.\n\n" if chat.mcp is not None else "")
        system = SYSTEM_PROMPT.format(role=run.role, timeout=self.command_timeout, mcp=mcp)
        chat.turns.append(Turn("user", run.instructions))
        answer = ModelAnswer("")
        for turn in range(1, self.max_turns + 1):
            answer = await self._ask(chat, system, turn)
            chat.turns.append(Turn("assistant", answer.text, answer.calls))
            if not answer.calls:
                return ToolOutcome(status="succeeded", output=answer.text,
                                   usage=chat.tokens.usage())
            for call in answer.calls:
                result = await self._call_tool(chat, call.name, call.arguments)
                chat.turns.append(Turn("tool", result, call_id=call.id, name=call.name))
        client = chat.client
        return ToolOutcome(
            status="failed", output=answer.text, usage=chat.tokens.usage(),
            error=f"The agent ({client.model} at {client.endpoint}) was still calling tools "
                  f"after {self.max_turns} turns, so Shoal stopped it. Split the subtask into "
                  "smaller ones, or raise the limit with SHOAL_AGENT_MAX_TURNS.",
        )

    async def _ask(self, chat: _Conversation, system: str, turn: int) -> ModelAnswer:
        """One model call: from the journal if an earlier attempt made it, else for real."""
        client = chat.client
        key = chat.journal.key(client.provider, client.model, system, chat.turns, chat.tools)
        if (known := chat.journal.get(key)) is not None:
            chat.tokens.replayed += 1
            if known.text:
                chat.run.log(known.text)
            return _numbered(known, turn)
        budget, run = chat.run.budget, chat.run
        if budget is not None and not budget.allows(with_cost(chat.tokens.usage(), client.model)):
            raise ModelError("The task's budget ran out, so the agent made no more model calls "
                             "(the control plane ends the task).", retryable=False)
        answer = await self._complete(chat, system)
        chat.tokens.add(answer.usage)
        if run.spent is not None:
            run.spent(with_cost(chat.tokens.usage(), client.model))
        answer = _numbered(answer, turn)
        chat.journal.put(key, answer)
        return answer

    async def _complete(self, chat: _Conversation, system: str) -> ModelAnswer:
        """Call the model, retrying what can be retried; stream its text to the log."""
        retry = 0
        while True:
            lines = _LineLog(chat.run.log, chat.run.stream)
            try:
                answer = await _request(chat, system, lines)
            except ModelError as exc:
                lines.flush()
                retry += 1
                if not exc.retryable or retry > self.retry.max_retries:
                    raise
                wait = self.retry.delay(retry, exc.retry_after)
                chat.run.log(f"model call failed: {exc.message} Retrying in {wait:.1f} s "
                             f"({retry}/{self.retry.max_retries}).")
                await asyncio.sleep(wait)
                continue
            lines.flush()
            return answer

    async def _call_tool(self, chat: _Conversation, name: str, raw: str) -> str:
        """Run one tool call; whatever goes wrong is told to the model, not raised."""
        run = chat.run
        handler = self._handlers.get(name)
        if chat.mcp is not None and chat.mcp.owns(name):
            return await _call_mcp(chat, chat.mcp, name, raw)
        if handler is None:
            run.log(f"{name or '(unnamed)'}: no such tool")
            return (f"Error: there is no tool named {name!r}. "
                    f"Use one of: {', '.join(self._handlers)}.")
        try:
            return await handler(chat, _parse_arguments(raw))
        except _BadArguments as exc:
            run.log(f"{name}: bad arguments ({exc})")
            return f"Error: {name} was called with bad arguments: {exc}"
        except _Refused as exc:
            chat.denials.append(exc.denial)
            run.log(f"{name} {exc.denial.target!r} denied: {exc.denial.reason}")
            return f"Error: permission denied: {exc.denial.reason} Nothing was changed."
        except UnsafePath as exc:
            path = exc.details.get("path") if isinstance(exc.details, dict) else None
            run.log(f"{name} {path!r} refused: {exc.message}")
            return (f"Error: the path {path!r} was refused: {exc.message} Use a path relative "
                    "to the workspace, without '..'. Nothing was read or written.")
        except (ToolError, OSError) as exc:
            message = exc.message if isinstance(exc, ToolError) else _os_message(exc)
            run.log(f"{name} failed: {message}")
            return f"Error: {name} failed: {message}"

    async def _read_file(self, chat: _Conversation, args: dict[str, Any]) -> str:
        run = chat.run
        path = _text_argument(args, "path")
        target = resolve_inside(run.workspace, path)
        size, text = await asyncio.to_thread(_read_text, target)
        run.log(f"read_file {path} ({size} bytes)")
        return text

    async def _write_file(self, chat: _Conversation, args: dict[str, Any]) -> str:
        run = chat.run
        path = _text_argument(args, "path")
        data = _text_argument(args, "content", allow_empty=True).encode("utf-8")
        target = resolve_inside(run.workspace, path)
        decision = chat.policy.edit(str(target), run.workspace)
        if not decision.allowed:
            raise _Refused(Denial("write_file", path, decision.reason, decision.needs_human))
        await asyncio.to_thread(_write_bytes, target, data)
        run.log(f"write_file {path} ({len(data)} bytes)")
        return f"Wrote {path} ({len(data)} bytes)."

    async def _list_files(self, chat: _Conversation, args: dict[str, Any]) -> str:
        run = chat.run
        path = str(args.get("path") or ".").strip()
        root = run.workspace.resolve()
        folder = root if path in ("", ".", "./") else resolve_inside(run.workspace, path)
        listing = await asyncio.to_thread(_list_tree, root, folder)
        run.log(f"list_files {path}")
        return listing

    async def _run_command(self, chat: _Conversation, args: dict[str, Any]) -> str:
        run = chat.run
        command = _text_argument(args, "command")
        decision = chat.policy.command(command)
        if not decision.allowed:
            raise _Refused(Denial("run_command", command, decision.reason,
                                  decision.needs_human))
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


class OpenAICompatTool(AgentLoopTool):
    """The agent loop against an OpenAI-compatible Chat Completions server."""

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
        journal_dir: Path | None = None,
        key_hint: str = "SHOAL_OPENAI_COMPAT_API_KEY",
    ) -> None:
        from shoal.tools.models.openai_chat import OpenAIChatClient

        self.base_url = base_url
        self.model = model

        def client() -> ModelClient:
            return OpenAIChatClient(base_url=base_url, api_key=api_key, model=model,
                                    provider=name, key_hint=key_hint,
                                    request_timeout=request_timeout)

        super().__init__(
            name=name, client=client,
            local=is_local_url(base_url) if local is None else local,
            version=version or f"openai-python {openai.__version__}",
            max_turns=max_turns, command_timeout=command_timeout,
            retry=RetryPolicy(max_retries=max_retries), journal_dir=journal_dir)


async def _request(chat: _Conversation, system: str, lines: _LineLog) -> ModelAnswer:
    """One model request; in a span of its own, with its tokens and cost, when the attempt
    is traced."""
    client, trace = chat.client, chat.run.trace
    if trace is None:
        return await client.complete(system, chat.turns, chat.tools, lines.feed)
    with trace.model_call(client.provider, client.model) as call:
        answer = await client.complete(system, chat.turns, chat.tools, lines.feed)
        call.usage = with_cost(answer.usage, client.model)
    return answer


async def _call_mcp(chat: _Conversation, tools: McpTools, name: str, raw: str) -> str:
    """One call of an MCP tool; what goes wrong is told to the model."""
    try:
        args = _parse_arguments(raw)
    except _BadArguments as exc:
        chat.run.log(f"{name}: bad arguments ({exc})")
        return f"Error: {name} was called with bad arguments: {exc}"
    try:
        result = await tools.call(name, args)
    except (McpError, OSError) as exc:
        chat.run.log(f"{name} failed: {exc}")
        return f"Error: {name} failed: {exc}"
    chat.run.log(f"{name} {json.dumps(args, ensure_ascii=False)[:300]}")
    return result


def _numbered(answer: ModelAnswer, turn: int) -> ModelAnswer:
    """Give calls without an id one (`call_<turn>_<index>`), so results can refer to them."""
    if all(c.id for c in answer.calls):
        return answer
    calls = tuple(c if c.id else type(c)(f"call_{turn}_{i}", c.name, c.arguments)
                  for i, c in enumerate(answer.calls))
    return ModelAnswer(answer.text, calls, answer.usage)


def _with_denials(outcome: ToolOutcome, denials: list[Denial]) -> ToolOutcome:
    if not denials:
        return outcome
    listed = "\n".join(f"- {d.tool} {d.target}: {d.reason}" for d in denials)
    return ToolOutcome(status=outcome.status, usage=outcome.usage, error=outcome.error,
                       output=f"{outcome.output}\n\nPermission denials:\n{listed}".strip(),
                       denials=tuple(denials))


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


def _os_message(exc: OSError) -> str:
    return f"{exc.strerror or exc}" + (f" ({exc.filename})" if exc.filename else "")
