"""The vendor-neutral conversation every protocol of the fake model server is decoded into.

Each protocol module (OpenAI Chat Completions, OpenAI Responses, Anthropic Messages, Gemini,
Ollama) decodes a request into a `Conversation`, asks the script (`shoal.demo.model`)
for a `Reply`, and encodes that reply in its own wire format. The script thinks in four neutral
actions — `write_file`, `read_file`, `list_files`, `run_command`, with workspace-relative
paths — and `fit_calls` turns them into calls of the tools the client actually offered
(Claude Code's `Write`/`Bash`, Gemini CLI's `write_file`/`run_shell_command`, Codex's
`exec_command`, Shoal's own loop's tools), falling back to a shell command where the client
has no file tool.
"""

from __future__ import annotations

import asyncio
import json
import re
import shlex
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

Role = Literal["system", "user", "assistant", "tool"]
PIECE = 48  # characters per streamed delta, so clients really reassemble


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A call the model makes: a tool name and its arguments."""

    name: str
    arguments: dict[str, Any]
    id: str = ""


@dataclass(frozen=True, slots=True)
class Message:
    """One turn of a conversation, whatever protocol carried it.

    `role="tool"` is a tool result (its `text` is what the tool returned); an assistant turn
    carries the `tool_calls` it made.
    """

    role: Role
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool the client offered: its name and the names of its parameters."""

    name: str
    parameters: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Conversation:
    """A decoded request."""

    api: str  # "openai_chat", "openai_responses", "anthropic", "gemini", "ollama_chat", …
    model: str
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    stream: bool = False

    def texts(self, *roles: Role) -> list[str]:
        return [m.text for m in self.messages if m.role in roles]


FaultKind = Literal["status", "malformed", "stall"]


@dataclass(frozen=True, slots=True)
class Fault:
    """A scripted failure the protocol module must render in its own format.

    - `status`: an HTTP error with the vendor's error body (and `Retry-After` when set);
    - `malformed`: a body (or one stream event) that is not valid JSON;
    - `stall`: a stream that sends its first event and then nothing, until the client leaves.
    """

    kind: FaultKind
    status: int = 500
    message: str = ""
    retry_after: float | None = None
    times: int | None = None  # only the first `times` requests of a conversation; None: all
    counted_by: str | None = None  # counted across every conversation carrying this marker


@dataclass(frozen=True, slots=True)
class Reply:
    """What the model answers: text, tool calls, or a fault; `pace` seconds between events."""

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    fault: Fault | None = None
    delay: float = 0.0  # before answering at all
    pace: float = 0.0  # between stream events


def text_of(content: Any) -> str:
    """The text of a content field: a string, or a list of parts with "text"."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def json_object(raw: Any) -> dict[str, Any]:
    """Tool-call arguments as an object: parsed from JSON text, {} when not an object."""
    try:
        value = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def schema_parameters(schema: Any) -> tuple[str, ...]:
    """The property names of a JSON schema (or an empty tuple)."""
    if isinstance(schema, Mapping):
        props = schema.get("properties")
        if isinstance(props, Mapping):
            return tuple(str(k) for k in props)
    return ()


def usage_counts(conversation: Conversation, reply: Reply) -> tuple[int, int]:
    """Token counts the fake reports: about one token per four characters, at least one."""
    prompt = sum(len(m.text) + len(json.dumps([c.arguments for c in m.tool_calls]))
                 for m in conversation.messages)
    answer = len(reply.text) + sum(len(json.dumps(c.arguments)) for c in reply.tool_calls)
    return max(1, prompt // 4), max(1, answer // 4)


def pieces(text: str, size: int = PIECE) -> Iterator[str]:
    """`text` in chunks of `size` characters (nothing for an empty text)."""
    for start in range(0, len(text), size):
        yield text[start:start + size]


async def paced(events: Iterable[str], reply: Reply) -> AsyncIterator[str]:
    """Yield stream events `reply.pace` seconds apart; a `stall` fault stops after the first."""
    stall = reply.fault is not None and reply.fault.kind == "stall"
    for number, event in enumerate(events):
        if number and reply.pace:
            await asyncio.sleep(reply.pace)
        yield event
        if stall:
            await asyncio.Event().wait()  # until the client hangs up and the task is cancelled


# ---- fitting neutral actions to the tools the client offered ---------------------------------

_WORKSPACE_PATTERNS = (
    re.compile(r"^[ \t]*Workspace:[ \t]*(/\S+)", re.MULTILINE),
    re.compile(r"Primary working directory:[ \t]*(/\S+)"),
    re.compile(r"[Ww]orking directory:[ \t]*(/\S+)"),
    re.compile(r"working in the directory:?[ \t]*(/\S+)"),
    re.compile(r"<cwd>(/[^<\s]+)</cwd>"),
)

_SHELL_TOOLS = {  # tool name → the parameter that takes the command
    "run_command": "command", "Bash": "command", "run_shell_command": "command",
    "exec_command": "cmd", "shell": "command", "local_shell": "command",
}
_WRITE_TOOLS = ("write_file", "Write", "create_file")
_READ_TOOLS = ("read_file", "Read")
_LIST_TOOLS = ("list_files", "list_directory", "LS")


def workspace_of(conversation: Conversation) -> str | None:
    """The absolute workspace folder the conversation names, if any."""
    for text in conversation.texts("system", "user"):
        for pattern in _WORKSPACE_PATTERNS:
            if found := pattern.search(text):
                return found.group(1).rstrip("/.,;:`'\")")
    return None


def fit_calls(calls: Sequence[ToolCall], conversation: Conversation) -> tuple[ToolCall, ...]:
    """Turn the script's neutral calls into calls of the tools the client offered.

    With no tools offered (a plain chat), the calls are returned unchanged.
    """
    if not conversation.tools:
        return tuple(calls)
    offered = {t.name: t for t in conversation.tools}
    workspace = workspace_of(conversation)
    return tuple(_fit(call, offered, workspace) for call in calls)


def _fit(call: ToolCall, offered: Mapping[str, ToolSpec], workspace: str | None) -> ToolCall:
    args = call.arguments
    if call.name in offered and _accepts(offered[call.name], args):
        return call
    if call.name == "write_file":
        for name in _WRITE_TOOLS:
            if spec := offered.get(name):
                path_key = _path_key(spec)
                if path_key and "content" in spec.parameters:
                    return ToolCall(name, {path_key: _path(args["path"], path_key, workspace),
                                           "content": args["content"]}, call.id)
        return _shell(offered, _write_command(args["path"], str(args["content"])), call.id)
    if call.name == "read_file":
        for name in _READ_TOOLS:
            if (spec := offered.get(name)) and (path_key := _path_key(spec)):
                return ToolCall(name, {path_key: _path(args["path"], path_key, workspace)},
                                call.id)
        return _shell(offered, f"cat {shlex.quote(str(args['path']))}", call.id)
    if call.name == "list_files":
        for name in _LIST_TOOLS:
            if (spec := offered.get(name)) and (path_key := _path_key(spec)):
                return ToolCall(name, {path_key: _path(args.get("path", "."), path_key,
                                                       workspace)}, call.id)
        return _shell(offered, f"ls -R {shlex.quote(str(args.get('path', '.')))}", call.id)
    if call.name == "run_command":
        return _shell(offered, str(args["command"]), call.id)
    return call


def _accepts(spec: ToolSpec, args: Mapping[str, Any]) -> bool:
    return not spec.parameters or all(key in spec.parameters for key in args)


def _path_key(spec: ToolSpec) -> str | None:
    for key in ("path", "file_path", "absolute_path", "dir_path", "directory"):
        if key in spec.parameters:
            return key
    return None


def _path(path: Any, key: str, workspace: str | None) -> str:
    text = str(path)
    if key == "path" or workspace is None or text.startswith("/"):
        return text
    return workspace if text in (".", "") else f"{workspace}/{text}"


def _write_command(path: Any, content: str) -> str:
    target = shlex.quote(str(path))
    folder = str(path).rsplit("/", 1)[0] if "/" in str(path) else ""
    make = f"mkdir -p {shlex.quote(folder)} && " if folder else ""
    return f"{make}printf '%s' {shlex.quote(content)} > {target}"


def _shell(offered: Mapping[str, ToolSpec], command: str, call_id: str) -> ToolCall:
    for name, key in _SHELL_TOOLS.items():
        if spec := offered.get(name):
            if key not in spec.parameters and spec.parameters:
                key = spec.parameters[0]
            value: Any = ["bash", "-lc", command] if name in ("shell", "local_shell") else command
            return ToolCall(name, {key: value}, call_id)
    # No shell either: the best the fake can do is to say so in text-free call form.
    return ToolCall("run_command", {"command": command}, call_id)


@dataclass
class CallIds:
    """Stable ids for the calls of one reply: `<prefix>_<request>_<index>`."""

    prefix: str
    number: int
    issued: list[str] = field(default_factory=list)

    def __call__(self, index: int) -> str:
        value = f"{self.prefix}_{self.number}_{index}"
        self.issued.append(value)
        return value
