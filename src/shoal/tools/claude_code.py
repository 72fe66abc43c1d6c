"""The `claude_code` tool: runs the Claude Code CLI headless, with approvals routed to Shoal.

One attempt is one `claude -p` process in the workspace, in stream-json mode both ways:

    claude -p --input-format stream-json --output-format stream-json --verbose
           --permission-prompt-tool stdio --permission-mode default
           --setting-sources user --strict-mcp-config --settings <ask rules>
           --no-session-persistence [--model M]

The prompt goes in as one stream-json user message on stdin; stdin stays open so the CLI can
ask Shoal for permission. The control protocol (measured with CLI 2.1.197, and the same as the
claude-agent-sdk's) is one JSON object per line:

- Shoal → CLI, optional handshake:
  `{"type":"control_request","request_id":"init_1","request":{"subtype":"initialize","hooks":null}}`
  answered by `{"type":"control_response","response":{"subtype":"success","request_id":…,
  "response":{"commands":[…],…}}}`.
- Shoal → CLI, the prompt: `{"type":"user","message":{"role":"user","content":"…"},
  "parent_tool_use_id":null,"session_id":""}`.
- CLI → Shoal, before a tool runs that needs approval: `{"type":"control_request",
  "request_id":"<uuid>","request":{"subtype":"can_use_tool","tool_name":"Write",
  "input":{…},"tool_use_id":"toolu_…","permission_suggestions":[…],"decision_reason":…}}`;
  Shoal answers `{"type":"control_response","response":{"subtype":"success","request_id":…,
  "response":{"behavior":"allow","updatedInput":{…}}}}` or `{"behavior":"deny",
  "message":"<reason>"}` (the model gets the message as an error tool result).
- Shoal → CLI, to stop: `{"type":"control_request","request_id":…,"request":
  {"subtype":"interrupt"}}`; the CLI answers success, ends the turn with a `result` of subtype
  `error_during_execution`, and exits once stdin is closed.

Which tools ask is the CLI's call: reads inside the working folder never ask, edits do, and
most commands do — but commands it deems read-only (`ls`, `cat`) would not, so the `--settings`
rules force an `ask` for Bash, Edit, Write and NotebookEdit: every edit and every command
reaches `PermissionPolicy`. `--setting-sources user` (an empty private HOME) and
`--strict-mcp-config` keep a workspace's own `.claude/settings.json` (allow rules, hooks) and
`.mcp.json` from loosening that. Skip-permission flags are never used.

Each run gets a private HOME (with `CLAUDE_CONFIG_DIR` inside it) and the variables that stop
the CLI's non-essential traffic, so it talks to `ANTHROPIC_BASE_URL` only.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from shoal.config import Settings
from shoal.errors import ShoalError
from shoal.process import CommandResult, run_command
from shoal.protocol import Usage
from shoal.tools import mcp_config
from shoal.tools.base import Probe, ToolOutcome, ToolRun
from shoal.tools.cli_support import (
    JsonLines,
    cli_env,
    cli_prompt,
    cli_version,
    find_cli,
    private_home,
)
from shoal.tools.permissions import Decision, Denial, PermissionPolicy
from shoal.tools.pricing import with_cost

NAME = "claude_code"
MCP_START_MS = 60_000  # the most a run waits for its MCP servers to start
ENABLE = ("npm install -g @anthropic-ai/claude-code and set ANTHROPIC_API_KEY "
          "(or SHOAL_ANTHROPIC_API_KEY)")
_ASK_RULES = {"permissions": {"ask": ["Bash", "Edit", "Write", "NotebookEdit"]}}
_EDIT_TOOLS = ("Write", "Edit", "MultiEdit", "NotebookEdit")
_READ_TOOLS = ("Read", "Glob", "Grep", "LS", "NotebookRead")
_MAX_LINE = 64 * 1024 * 1024  # stream-json events carry whole files; never split one
_STDERR_TAIL = 2_000
_LOGGED = 500  # characters of assistant text or tool output per log line


class ClaudeCodeTool:
    """Runs attempts with the Claude Code CLI (`claude -p`), approvals answered by Shoal."""

    name = NAME
    local = False

    def __init__(self, *, binary: str, api_key: str | None, base_url: str | None = None,
                 model: str | None = None, version: str | None = None,
                 settings: Settings | None = None) -> None:
        self.binary = binary
        self.version = version
        self._api_key = api_key
        self._base_url = base_url
        self._model = model
        self._settings = settings

    async def run(self, run: ToolRun) -> ToolOutcome:
        """Run `claude -p` in the workspace until its `result` event; see the module docstring."""
        try:
            policy = PermissionPolicy.from_options(run.options)
        except ShoalError as exc:
            return ToolOutcome(status="failed", error=exc.message)
        session = _Session(run, policy)
        servers, session.denials = mcp_config.allowed(run, policy)
        with private_home("claude") as home:
            mcp_file = None
            if servers:  # outside the workspace: the agent's files are collected from there
                mcp_file = home / "mcp.json"
                mcp_file.write_text(json.dumps(mcp_config.claude_config(servers, run.workspace)))
            result = await run_command(
                self.argv(mcp_file), cwd=run.workspace, timeout=run.timeout, env=self._env(home),
                on_line=JsonLines(session.on_event, session.on_text), on_start=session.start,
                interrupt=session.interrupt, max_line=_MAX_LINE)
        if result.timed_out:
            raise TimeoutError(f"Claude Code did not finish within {run.timeout:g} s and was "
                               "stopped. Give the step more time or split it.")
        return session.outcome(result)

    def argv(self, mcp_file: Path | None = None) -> list[str]:
        """The command line of one run (with the role's MCP servers in `mcp_file`)."""
        argv = [self.binary, "-p", "--input-format", "stream-json",
                "--output-format", "stream-json", "--verbose",
                "--permission-prompt-tool", "stdio", "--permission-mode", "default",
                "--setting-sources", "user", "--strict-mcp-config",
                "--settings", json.dumps(_ASK_RULES), "--no-session-persistence"]
        if mcp_file is not None:
            argv += ["--mcp-config", str(mcp_file)]
        if self._model:
            argv += ["--model", self._model]
        return argv

    def _env(self, home: Path) -> dict[str, str]:
        extra = {"CLAUDE_CONFIG_DIR": str(home / ".claude"),
                 "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1",
                 "DISABLE_AUTOUPDATER": "1", "DISABLE_ERROR_REPORTING": "1",
                 # `-p` connects MCP servers in the background and takes its first model
                 # request's tools from whichever have connected by then: on a busy machine a
                 # role's server may not have, and the model goes on without its tools (seen
                 # under load). Wait for them (MCP_CONNECTION_NONBLOCKING=false), at most
                 # MCP_START_MS.
                 "MCP_CONNECTION_NONBLOCKING": "false",
                 "MCP_CONNECT_TIMEOUT_MS": str(MCP_START_MS), "MCP_TIMEOUT": str(MCP_START_MS)}
        if self._api_key:
            extra["ANTHROPIC_API_KEY"] = self._api_key
        if self._base_url:
            extra["ANTHROPIC_BASE_URL"] = self._base_url
        return cli_env(home, extra, self._settings)


class _Session:
    """One run's side of the stream-json conversation: events in, answers out."""

    def __init__(self, run: ToolRun, policy: PermissionPolicy) -> None:
        self._run = run
        self._policy = policy
        self._workspace = run.workspace.resolve()
        self._stdin: asyncio.StreamWriter | None = None
        self._finished = asyncio.Event()
        self.result: dict[str, Any] | None = None
        self.denials: list[Denial] = []
        self.model: str | None = None  # as the CLI names it in its init event
        self._denied_ids: set[str] = set()
        self._spent = Usage()  # the assistant messages' tokens so far (a task with a budget)

    # -- writing ----------------------------------------------------------------------------

    def start(self, stdin: asyncio.StreamWriter) -> None:
        """Handshake and send the prompt; stdin stays open for permission answers."""
        self._stdin = stdin
        self._send({"type": "control_request", "request_id": "init_1",
                    "request": {"subtype": "initialize", "hooks": None}})
        self._send({"type": "user", "message": {"role": "user", "content": cli_prompt(self._run)},
                    "parent_tool_use_id": None, "session_id": ""})

    def _send(self, message: Mapping[str, Any]) -> None:
        if self._stdin is not None and not self._stdin.is_closing():
            self._stdin.write((json.dumps(message) + "\n").encode())

    def _close_stdin(self) -> None:
        if self._stdin is not None and not self._stdin.is_closing():
            self._stdin.close()

    async def interrupt(self) -> None:
        """The protocol interrupt: ask the CLI to stop, wait for its result, let it exit."""
        try:
            self._send({"type": "control_request", "request_id": f"interrupt_{uuid.uuid4().hex}",
                        "request": {"subtype": "interrupt"}})
            await self._finished.wait()
        finally:
            self._close_stdin()

    # -- reading ----------------------------------------------------------------------------

    def on_text(self, line: str) -> None:
        self._run.log(f"claude: {line.rstrip()[:_LOGGED]}")

    def on_event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "control_request":
            self._answer(event)
        elif kind == "system" and event.get("subtype") == "init":
            self._run.log(f"claude_code {event.get('claude_code_version', '?')}, model "
                          f"{event.get('model', '?')}, in {event.get('cwd', '?')}")
            self.model = str(event.get("model") or "")[:200] or None
            if self._run.trace is not None and self.model:  # the attempt's span names it
                self._run.trace.note_model(self.model)
        elif kind == "assistant":
            self._log_assistant(event.get("message"))
            self._count(event.get("message"))
        elif kind == "user":
            self._log_results(event.get("message"))
        elif kind == "result":
            self.result = event
            self._note_cli_denials(event.get("permission_denials"))
            self._log_usage(event)
            self._finished.set()
            self._close_stdin()  # one prompt per run: the CLI exits when its input ends

    def _answer(self, event: dict[str, Any]) -> None:
        request = event.get("request") or {}
        request_id = event.get("request_id")
        if request.get("subtype") != "can_use_tool":
            self._send({"type": "control_response", "response": {
                "subtype": "error", "request_id": request_id,
                "error": f"Shoal does not handle {request.get('subtype')!r} requests."}})
            return
        tool = str(request.get("tool_name", ""))
        raw = request.get("input")
        tool_input: dict[str, Any] = raw if isinstance(raw, dict) else {}
        target, decision = decide(self._policy, self._workspace, tool, tool_input)
        if decision.allowed:
            response: dict[str, Any] = {"behavior": "allow", "updatedInput": tool_input}
        else:
            self.denials.append(Denial(tool, target, decision.reason, decision.needs_human))
            self._denied_ids.add(str(request.get("tool_use_id", "")))
            self._run.log(f"{tool} {target!r} denied: {decision.reason}")
            response = {"behavior": "deny", "message": f"Permission denied: {decision.reason}"}
        self._send({"type": "control_response", "response": {
            "subtype": "success", "request_id": request_id, "response": response}})

    def _note_cli_denials(self, listed: Any) -> None:
        """Denials the CLI made on its own (without asking Shoal) are reported too."""
        for entry in listed if isinstance(listed, list) else []:
            if not isinstance(entry, dict) or entry.get("tool_use_id") in self._denied_ids:
                continue
            tool = str(entry.get("tool_name", ""))
            tool_input = entry.get("tool_input")
            target = _describe(tool_input, self._workspace) if tool_input else ""
            self.denials.append(Denial(tool, target, "Claude Code refused it by its own rules."))
            self._run.log(f"{tool} {target!r} denied by Claude Code itself")

    def _log_assistant(self, message: Any) -> None:
        for block in _blocks(message):
            if block.get("type") == "text" and str(block.get("text", "")).strip():
                self._run.log(f"assistant: {str(block['text']).strip()[:_LOGGED]}")
                if self._run.stream is not None:  # each assistant message, as it comes
                    self._run.stream(str(block["text"]))
            elif block.get("type") == "tool_use":
                self._run.log(f"tool: {block.get('name')} "
                              f"{_describe(block.get('input'), self._workspace)}".rstrip())

    def _count(self, message: Any) -> None:
        """Add one model answer's tokens, and tell the worker what the attempt has spent so
        far (only for a task with a budget: past it, the control plane stops the CLI)."""
        if self._run.spent is None or not isinstance(message, dict):
            return
        turn = usage_of(message)
        self._spent = Usage(input_tokens=self._spent.input_tokens + turn.input_tokens,
                            output_tokens=self._spent.output_tokens + turn.output_tokens)
        self._run.spent(with_cost(self._spent, self.model or ""))

    def _log_results(self, message: Any) -> None:
        for block in _blocks(message):
            if block.get("type") == "tool_result":
                text = _content_text(block.get("content")).strip()
                first = text.splitlines()[0] if text else "(no output)"
                label = "tool error" if block.get("is_error") else "tool result"
                self._run.log(f"{label}: {first[:_LOGGED]}")

    def _log_usage(self, event: Mapping[str, Any]) -> None:
        usage = usage_of(event)
        self._run.log(f"usage: {usage.input_tokens} input, {usage.output_tokens} output tokens, "
                      f"${usage.cost_usd:.4f}")

    # -- the end ----------------------------------------------------------------------------

    def outcome(self, command: CommandResult) -> ToolOutcome:
        """How the run ended, from the `result` event (or its absence) and the exit code."""
        result = self.result
        stderr = command.stderr.strip()[-_STDERR_TAIL:]
        if result is None:
            error = (f"Claude Code exited with code {command.exit_code} without a result. "
                     "Check its output below, the API key and the base URL.")
            return self._with_denials(ToolOutcome(
                status="failed", error=f"{error}\n{stderr}".strip()))
        text = str(result.get("result") or "")
        usage = usage_of(result, self.model)
        if result.get("is_error") or result.get("subtype") != "success":
            errors = "; ".join(str(e) for e in result.get("errors") or [])
            said = text or errors or str(result.get("subtype"))
            error = f"Claude Code failed: {said}"
            if stderr:
                error += f"\n{stderr}"
            return self._with_denials(ToolOutcome(status="failed", output=text, usage=usage,
                                                  error=error))
        return self._with_denials(ToolOutcome(status="succeeded", output=text, usage=usage))

    def _with_denials(self, outcome: ToolOutcome) -> ToolOutcome:
        if not self.denials:
            return outcome
        listed = "Permission denials:\n" + "\n".join(
            f"- {d.tool} {d.target}: {d.reason}" for d in self.denials)
        error = f"{outcome.error}\n\n{listed}" if outcome.error else None
        return ToolOutcome(status=outcome.status, usage=outcome.usage, error=error,
                           output=f"{outcome.output}\n\n{listed}".strip(),
                           denials=tuple(self.denials))


def decide(policy: PermissionPolicy, workspace: Path, tool: str,
           tool_input: Mapping[str, Any]) -> tuple[str, Decision]:
    """The target of a Claude Code tool call and the policy's answer to it."""
    if tool in _EDIT_TOOLS:
        path = str(tool_input.get("file_path") or tool_input.get("notebook_path") or "")
        if not path:
            return "", Decision(False, f"The {tool} call names no file.")
        return path, policy.edit(path, workspace)
    if tool in _READ_TOOLS:
        path = str(tool_input.get("file_path") or tool_input.get("path") or workspace)
        return path, policy.read(path, workspace)
    if tool == "Bash":
        command = str(tool_input.get("command", ""))
        return command, policy.command(command)
    if tool.startswith("mcp__"):  # mcp__<server>__<tool>
        server, _, name = tool.removeprefix("mcp__").partition("__")
        return server, policy.mcp_tool(server, name)
    if tool == "AskUserQuestion":
        return "", Decision(False, "No one can answer questions during this run; decide "
                            "yourself and go on.", needs_human=True)
    return "", Decision(False, f"Shoal's permission policy has no rule for the {tool} tool, "
                        "so it is denied; agents may edit files in their workspace and run "
                        "commands.")


def usage_of(result: Mapping[str, Any], model: str | None = None) -> Usage:
    """Tokens and cost from a `result` event (cached input counts as input), naming `model`."""
    found = result.get("usage")
    raw: dict[str, Any] = found if isinstance(found, dict) else {}
    tokens = sum(int(raw.get(key) or 0) for key in (
        "input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"))
    return Usage(input_tokens=tokens, output_tokens=int(raw.get("output_tokens") or 0),
                 cost_usd=float(result.get("total_cost_usd") or 0.0), model=model or None)


def _blocks(message: Any) -> list[dict[str, Any]]:
    content = message.get("content") if isinstance(message, dict) else None
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return ""


def _describe(tool_input: Any, workspace: Path) -> str:
    """A short label for a tool call: its file (relative to the workspace), command or input."""
    if not isinstance(tool_input, dict):
        return ""
    path = tool_input.get("file_path") or tool_input.get("notebook_path")
    if path:
        candidate = Path(str(path))
        return str(candidate.relative_to(workspace)) if candidate.is_relative_to(workspace) \
            else str(candidate)
    if "command" in tool_input:
        lines = str(tool_input["command"]).strip().splitlines()
        return (lines[0] if lines else "")[:200]
    return json.dumps(tool_input)[:200]


# ---- discovery --------------------------------------------------------------------------


async def probe(settings: Settings) -> Probe:
    """Is the Claude Code CLI here, which version, and is there an API key? (No model call.)"""
    path = find_cli(settings.claude_binary, settings)
    if path is None:
        where = " or in SHOAL_TOOL_PATH" if settings.tool_path else ""
        return Probe(NAME, False, detail=f"{settings.claude_binary!r} was not found on "
                     f"PATH{where}.", enable=ENABLE)
    version = await cli_version(path, settings)
    if version is None:
        return Probe(NAME, False, detail=f"{path} --version did not answer with a version.",
                     enable=f"Reinstall it: {ENABLE}")
    if settings.anthropic_api_key is None or not settings.anthropic_api_key.get_secret_value():
        return Probe(NAME, False, version=version,
                     detail=f"{path} is installed, but no Anthropic API key is set.",
                     enable="Set ANTHROPIC_API_KEY (or SHOAL_ANTHROPIC_API_KEY).")
    via = f" via {settings.anthropic_base_url}" if settings.anthropic_base_url else ""
    return Probe(NAME, True, version=version, detail=f"{path}{via}")


def create(settings: Settings, probe: Probe) -> ClaudeCodeTool:
    """The tool for a worker, from its settings and what `probe` found."""
    key = settings.anthropic_api_key.get_secret_value() if settings.anthropic_api_key else None
    return ClaudeCodeTool(
        binary=find_cli(settings.claude_binary, settings) or settings.claude_binary,
        api_key=key, base_url=settings.anthropic_base_url, model=settings.claude_model,
        version=probe.version, settings=settings)
