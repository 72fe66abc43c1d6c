"""The `codex` tool: OpenAI's Codex CLI, run headless (`codex exec --json`) in the workspace.

Each run gets a private HOME with its own `CODEX_HOME/config.toml`: the model, approval policy
"never" (exec mode cannot ask anyone) and — when `openai_base_url` is set — a custom provider
speaking the Responses API at that URL. Codex ignores `OPENAI_BASE_URL`, so the provider is
the only way to point it elsewhere. The flags turn off plugins, apps, analytics and update
checks, so nothing but the model API is contacted.

The task's `PermissionPolicy` becomes the CLI's own limits: edits allowed → the
`workspace-write` sandbox; edits denied (or "ask", which nobody can answer) → `read-only`;
commands denied → no shell tool at all. The CLI is never started with
`--dangerously-bypass-approvals-and-sandbox`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shoal.config import Settings
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
from shoal.tools.permissions import PermissionPolicy
from shoal.tools.pricing import with_cost

KEY_VARIABLE = "SHOAL_CODEX_API_KEY"  # the custom provider's `env_key`
PLACEHOLDER_KEY = "sk-local"  # for a custom base URL that needs no key
_QUIET = ("--disable", "plugins", "--disable", "remote_plugin", "--disable", "apps",
          "-c", "analytics.enabled=false", "-c", "check_for_update_on_startup=false")
_NOISE = ("Reading additional input from stdin", "could not create PATH aliases")
_STDERR_TAIL = 1_500
_SHOWN = 300  # characters of a command, message or output shown in the log


class CodexTool:
    """Runs attempts with the Codex CLI against OpenAI or an OpenAI-compatible server."""

    name = "codex"
    local = False

    def __init__(self, *, binary: str, settings: Settings, version: str | None = None) -> None:
        self.binary = binary
        self.version = version
        self._settings = settings

    async def run(self, run: ToolRun) -> ToolOutcome:
        """Run `codex exec` on the instructions; raise TimeoutError past `run.timeout`."""
        policy = PermissionPolicy.from_options(run.options)
        progress = Progress(run.log, stream=run.stream, spent=run.spent,
                            model=self._settings.codex_model)
        servers, refused = mcp_config.allowed(run, policy)
        with private_home("codex") as home:
            codex_home = home / ".codex"
            await asyncio.to_thread(write_config, codex_home, self._settings)
            result = await run_command(
                command_line(self.binary, cli_prompt(run), policy,
                             mcp_config.codex_overrides(servers, run.workspace)),
                cwd=run.workspace,
                timeout=run.timeout, env=cli_env(home, self._env(codex_home), self._settings),
                on_line=JsonLines(progress.on_event, progress.on_text))
        if result.timed_out:
            raise TimeoutError(f"codex did not finish within {run.timeout:g} seconds and was "
                               "stopped (with every process it started).")
        outcome = progress.outcome(result)
        if run.trace is not None:  # the attempt's span names the model
            run.trace.note_model(self._settings.codex_model)
        return dataclasses.replace(
            outcome, usage=with_cost(outcome.usage, self._settings.codex_model),
            denials=(*refused, *outcome.denials))

    def _env(self, codex_home: Path) -> dict[str, str]:
        key = self._settings.openai_api_key
        secret = key.get_secret_value() if key is not None else ""
        if self._settings.openai_base_url:
            return {"CODEX_HOME": str(codex_home), KEY_VARIABLE: secret or PLACEHOLDER_KEY}
        # The built-in OpenAI provider: `codex exec` 0.169 authenticates with CODEX_API_KEY
        # (seen as its Bearer token); OPENAI_API_KEY is for builds that read that instead.
        return {"CODEX_HOME": str(codex_home), "CODEX_API_KEY": secret,
                "OPENAI_API_KEY": secret}


def command_line(binary: str, prompt: str, policy: PermissionPolicy,
                 mcp: Sequence[str] = ()) -> list[str]:
    """The `codex exec` argv for one run under `policy` (`mcp`: its MCP servers' `-c`s)."""
    sandbox = "workspace-write" if policy.edits == "allow" else "read-only"
    no_shell = ["--disable", "shell_tool"] if policy.commands != "allow" else []
    return [binary, "exec", "--json", "--skip-git-repo-check", "--ephemeral", *_QUIET,
            "--sandbox", sandbox, *no_shell, *mcp, "--", prompt]


def config_toml(settings: Settings) -> str:
    """The run's `config.toml`: model, approvals, and the custom provider when a URL is set."""
    lines = [f"model = {_toml(settings.codex_model)}", 'approval_policy = "never"']
    if settings.openai_base_url:
        retries = settings.model_max_retries
        lines += ['model_provider = "shoal"', "", "[model_providers.shoal]",
                  'name = "OpenAI-compatible server (via Shoal)"',
                  f"base_url = {_toml(settings.openai_base_url.rstrip('/'))}",
                  f"env_key = {_toml(KEY_VARIABLE)}", 'wire_api = "responses"',
                  f"request_max_retries = {retries}", f"stream_max_retries = {retries}"]
    return "\n".join(lines) + "\n"


def write_config(codex_home: Path, settings: Settings) -> None:
    """Create `codex_home` with the run's `config.toml` in it."""
    codex_home.mkdir(mode=0o700)
    (codex_home / "config.toml").write_text(config_toml(settings), encoding="utf-8")


def _toml(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)  # also a valid TOML basic string


# ---- reading the JSONL events ------------------------------------------------------------


@dataclass
class Progress:
    """Follows `codex exec --json` events: logs progress, keeps the answer and the ending."""

    log: Callable[[str], None]
    answer: str = ""
    usage: Usage = field(default_factory=Usage)
    completed: bool = False
    failure: str | None = None
    last_error: str | None = None
    stream: Callable[[str], None] | None = None  # each agent message, as it comes
    spent: Callable[[Usage], None] | None = None  # the attempt's spending after each turn
    model: str = ""  # for the cost of `spent`

    def on_event(self, event: dict[str, Any]) -> None:
        kind = str(event.get("type", ""))
        item = event.get("item")
        if kind in ("item.started", "item.completed") and isinstance(item, dict):
            self._on_item(kind, item)
        elif kind == "turn.started":
            self.log("codex: turn started")
        elif kind == "turn.completed":
            self.completed = True
            self._add_usage(event.get("usage"))
        elif kind == "turn.failed":
            error = event.get("error")
            self.failure = _message(error.get("message") if isinstance(error, dict) else error)
            self.log(f"codex: turn failed: {self.failure[:_SHOWN]}")
        elif kind == "error":
            self.last_error = _message(event.get("message"))
            self.log(f"codex: {self.last_error[:_SHOWN]}")
        elif kind == "thread.started":
            self.log(f"codex: session {event.get('thread_id', '')}")

    def on_text(self, line: str) -> None:
        if not any(noise in line for noise in _NOISE):
            self.log(f"codex: {line[:_SHOWN]}")

    def _on_item(self, kind: str, item: dict[str, Any]) -> None:
        match item.get("type"), kind:
            case "command_execution", "item.started":
                self.log(f"run_command {_clip(str(item.get('command', '')))}")
            case "command_execution", _:
                output = str(item.get("aggregated_output") or "").strip()
                self.log(f"command exited {item.get('exit_code')}"
                         + (f": {output[-_SHOWN:]}" if output else ""))
            case "agent_message", "item.completed":
                self.answer = str(item.get("text", ""))
                self.log(f"codex: {self.answer[:_SHOWN]}")
                if self.stream is not None:
                    self.stream(self.answer)
            case "file_change", "item.completed":
                for change in item.get("changes") or []:
                    if isinstance(change, dict):
                        self.log(f"file {change.get('kind', 'change')}: "
                                 f"{change.get('path', '')}")
            case "error", "item.completed":
                self.log(f"codex warning: {str(item.get('message', ''))[:_SHOWN]}")
            case ("reasoning" | "todo_list" | "mcp_tool_call" | "web_search") as other, \
                    "item.completed":
                self.log(f"codex: {other} {str(item.get('text', ''))[:_SHOWN]}".rstrip())

    def _add_usage(self, raw: Any) -> None:
        if isinstance(raw, dict):
            self.usage = Usage(
                input_tokens=self.usage.input_tokens + int(raw.get("input_tokens") or 0),
                output_tokens=self.usage.output_tokens + int(raw.get("output_tokens") or 0))
            if self.spent is not None:
                self.spent(with_cost(self.usage, self.model))

    def outcome(self, result: CommandResult) -> ToolOutcome:
        """How the run ended, from the events seen and the exit code."""
        if self.completed and self.failure is None and result.exit_code == 0:
            return ToolOutcome(status="succeeded", output=self.answer, usage=self.usage)
        ended = ("finished its turn but exited with code" if self.completed and
                 self.failure is None else "exited without finishing its turn, with code")
        reason = self.failure or self.last_error or f"codex {ended} {result.exit_code}"
        if "experiencing high demand" in reason:
            reason += " (Codex words every HTTP 500 from the model API this way)"
        tail = _stderr_tail(result.stderr)
        error = f"The Codex CLI failed: {reason}" + (f"\n--- stderr ---\n{tail}" if tail else "")
        return ToolOutcome(status="failed", output=self.answer, usage=self.usage, error=error)


def _message(raw: Any) -> str:
    """An error message, unwrapped from an API error body (`{"error": {"message": …}}`)."""
    text = str(raw or "unknown error")
    try:
        body = json.loads(text)
    except ValueError:
        return text
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        return str(body["error"].get("message") or text)
    return text


def _clip(text: str) -> str:
    """`text` on one line, its middle cut when long (the end of a command names its target)."""
    flat = text.replace("\n", "\\n")
    return flat if len(flat) <= _SHOWN else f"{flat[:_SHOWN - 100]} … {flat[-80:]}"


def _stderr_tail(stderr: str) -> str:
    lines = [line for line in stderr.splitlines()
             if line.strip() and not any(noise in line for noise in _NOISE)]
    return "\n".join(lines)[-_STDERR_TAIL:]


# ---- discovery ---------------------------------------------------------------------------


async def probe(settings: Settings) -> Probe:
    """Find the Codex CLI and its version, and check there is a key (no model call)."""
    path = find_cli(settings.codex_binary, settings)
    if path is None:
        return Probe("codex", False, detail=f"{settings.codex_binary!r} was not found on PATH"
                     f"{' or in ' + settings.tool_path if settings.tool_path else ''}.",
                     enable="Install it with `npm install -g @openai/codex` (or `make clis`), "
                     "or point SHOAL_CODEX_BINARY at it.")
    version = await cli_version(path, settings)
    if version is None:
        return Probe("codex", False, detail=f"{path} did not report a version for --version.",
                     enable="Reinstall it with `npm install -g @openai/codex`.")
    if settings.openai_api_key is None and not settings.openai_base_url:
        return Probe("codex", False, version=version,
                      detail=f"Found {path}, but there is no OpenAI API key.",
                      enable="Set OPENAI_API_KEY (or SHOAL_OPENAI_API_KEY), or point "
                      "SHOAL_OPENAI_BASE_URL at an OpenAI-compatible Responses API server.")
    where = settings.openai_base_url or "the OpenAI API"
    keyless = " (no API key set: a placeholder is sent)" if settings.openai_api_key is None \
        else ""
    return Probe("codex", True, version=version, detail=f"{path}, model "
                 f"{settings.codex_model!r} via {where}{keyless}")


def create(settings: Settings, probe: Probe) -> CodexTool:
    """The tool for a successful `probe`."""
    binary = find_cli(settings.codex_binary, settings) or settings.codex_binary
    return CodexTool(binary=binary, settings=settings, version=probe.version)
