"""The `gemini_cli` tool: Google's Gemini CLI, headless (`gemini -p … -o stream-json`).

Each run gets a private HOME holding `.gemini/settings.json` — API-key auth (without it a
custom base URL makes the CLI pick "gateway" auth and exit 41), no usage statistics,
telemetry, auto-update or update nag, and `general.maxAttempts` from `model_max_retries` (the
CLI's own default retries a 5xx or 429 ten times, waiting 5 to 30 seconds in between) — and
`.gemini/policies/shoal.toml`, a user-tier rule file for the CLI's policy engine. The model
is always passed with `-m`, which skips the CLI's router side call. `GEMINI_CLI_TRUST_WORKSPACE`
trusts the workspace (else exit 55), and TMPDIR points into the private HOME so the CLI's
error reports are removed with it.

The task's `PermissionPolicy` becomes an approval mode plus that policy file:
- edits allowed → `--approval-mode auto_edit`: `write_file` and `replace` run without asking,
  and the CLI's own path checker keeps them inside the workspace; edits denied (or "ask",
  which nobody can answer) → `default`, where headless mode refuses them, plus a rule saying
  why;
- commands allowed → a rule that allows `run_shell_command` (redirections included);
  denied or "ask" → a rule that denies it, so the model is not even offered the tool.

`yolo` is never used: the policy engine can say "shell commands may run" on its own, and yolo
would approve every other tool as well (MCP servers, skills, background processes). One gap:
with edits denied but commands allowed, a shell command can still change files, since the CLI
has no read-only sandbox short of a container.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass, field
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
from shoal.tools.permissions import Denial, PermissionPolicy
from shoal.tools.pricing import with_cost

NAME = "gemini_cli"
PLACEHOLDER_KEY = "shoal-local"  # for a custom base URL that needs no key
MAX_ATTEMPTS = 10  # the CLI refuses more
_EDIT_TOOLS = ("write_file", "replace")
_NOISE = ("Basic terminal detected", "256-color support not detected",
          "Ripgrep is not available", "[STARTUP]", "Loaded cached credentials")
_STDERR_TAIL = 1_500
_SHOWN = 300  # characters of a parameter, message or output shown in the log


class GeminiCliTool:
    """Runs attempts with the Gemini CLI against the Gemini API or a compatible server."""

    name = NAME
    local = False

    def __init__(self, *, binary: str, settings: Settings, version: str | None = None) -> None:
        self.binary = binary
        self.version = version
        self._settings = settings

    async def run(self, run: ToolRun) -> ToolOutcome:
        """Run `gemini -p` on the instructions; raise TimeoutError past `run.timeout`."""
        try:
            policy = PermissionPolicy.from_options(run.options)
        except ShoalError as exc:
            return ToolOutcome(status="failed", error=exc.message)
        progress = Progress(run.log, stream=run.stream)
        servers, refused = mcp_config.allowed(run, policy)
        with private_home("gemini") as home:
            await asyncio.to_thread(write_config, home, self._settings, policy,
                                    mcp_config.gemini_settings(servers, run.workspace))
            result = await run_command(
                command_line(self.binary, cli_prompt(run), model=self._settings.gemini_model,
                             policy=policy),
                cwd=run.workspace, timeout=run.timeout,
                env=cli_env(home, self._env(home), self._settings),
                on_line=JsonLines(progress.on_event, progress.on_text))
        if result.timed_out:
            raise TimeoutError(f"gemini did not finish within {run.timeout:g} seconds and was "
                               "stopped (with every process it started).")
        outcome = progress.outcome(result)
        if run.trace is not None:  # the attempt's span names the model
            run.trace.note_model(self._settings.gemini_model)
        return dataclasses.replace(
            outcome, usage=with_cost(outcome.usage, self._settings.gemini_model),
            denials=(*refused, *outcome.denials))

    def _env(self, home: Path) -> dict[str, str]:
        key = self._settings.gemini_api_key
        secret = key.get_secret_value() if key is not None else ""
        env = {"GEMINI_API_KEY": secret or PLACEHOLDER_KEY,
               "GEMINI_CLI_TRUST_WORKSPACE": "true", "TMPDIR": str(home / "tmp")}
        if self._settings.gemini_base_url:
            env["GOOGLE_GEMINI_BASE_URL"] = self._settings.gemini_base_url.rstrip("/")
        return env


def command_line(binary: str, prompt: str, *, model: str,
                 policy: PermissionPolicy) -> list[str]:
    """The `gemini` argv for one run under `policy`."""
    mode = "auto_edit" if policy.edits == "allow" else "default"
    return [binary, "--prompt", prompt, "--model", model, "--approval-mode", mode,
            "--output-format", "stream-json"]


def settings_json(settings: Settings) -> dict[str, Any]:
    """The run's `settings.json`: API-key auth, nothing sent or fetched but model calls."""
    return {
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
        "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False,
                    "maxAttempts": min(settings.model_max_retries + 1, MAX_ATTEMPTS)},
        "ide": {"enabled": False},
    }


def policy_toml(policy: PermissionPolicy) -> str:
    """Rules for the CLI's policy engine (user tier) that carry out `policy`."""
    rules: list[str] = []
    if policy.commands == "allow":
        rules.append(_rule("run_shell_command", "allow", allowRedirection=True))
    else:
        rules.append(_rule("run_shell_command", "deny", denyMessage=_refusal(
            policy.commands, "running shell commands")))
    if policy.edits != "allow":
        rules.append(_rule(list(_EDIT_TOOLS), "deny", denyMessage=_refusal(
            policy.edits, "editing files")))
    return "\n".join(rules)


def _rule(tool: str | list[str], decision: str, **extra: Any) -> str:
    fields = {"toolName": tool, "decision": decision, "priority": 900, **extra}
    # JSON strings, lists and booleans are valid TOML values.
    return "[[rule]]\n" + "".join(f"{key} = {json.dumps(value)}\n"
                                  for key, value in fields.items())


def _refusal(rule: str, what: str) -> str:
    if rule == "ask":
        return (f"The task's permission policy says to ask a person before {what}; no one "
                "can be asked during this run, so it is denied.")
    return f"The task's permission policy denies {what}."


def write_config(home: Path, settings: Settings, policy: PermissionPolicy,
                 mcp_servers: dict[str, Any] | None = None) -> None:
    """Write the run's settings (with the role's MCP servers, trusted: the policy allowed
    them) and policy file under `home/.gemini`, and its TMPDIR."""
    config = home / ".gemini"
    (config / "policies").mkdir(mode=0o700, parents=True)
    (home / "tmp").mkdir(mode=0o700)
    document = settings_json(settings) | ({"mcpServers": mcp_servers} if mcp_servers else {})
    (config / "settings.json").write_text(json.dumps(document, indent=2), encoding="utf-8")
    (config / "policies" / "shoal.toml").write_text(policy_toml(policy), encoding="utf-8")


# ---- reading the stream-json events ------------------------------------------------------


@dataclass
class Progress:
    """Follows `gemini -o stream-json` events: logs progress, keeps the answer and the end."""

    log: Callable[[str], None]
    answer: list[str] = field(default_factory=list)  # the assistant text since the last tool
    usage: Usage = field(default_factory=Usage)
    status: str | None = None  # the `result` event's status
    failure: str | None = None
    last_error: str | None = None
    denials: list[Denial] = field(default_factory=list)
    stream: Callable[[str], None] | None = None  # the assistant's text as it streams
    _calls: dict[str, tuple[str, str]] = field(default_factory=dict)  # id → (tool, target)
    _pending: list[str] = field(default_factory=list)  # streamed text not yet logged

    def on_event(self, event: dict[str, Any]) -> None:
        kind = str(event.get("type", ""))
        if kind == "message":
            if event.get("role") == "assistant":
                text = str(event.get("content") or "")
                self.answer.append(text)
                self._pending.append(text)
                if self.stream is not None and text:
                    self.stream(text)
            return
        self._flush()
        if kind == "tool_use":
            self._on_tool_use(event)
        elif kind == "tool_result":
            self._on_tool_result(event)
        elif kind == "error":
            message = str(event.get("message") or "")
            if event.get("severity") == "error":
                self.last_error = message
            self.log(f"gemini {event.get('severity') or 'error'}: {message[:_SHOWN]}")
        elif kind == "result":
            self._on_result(event)
        elif kind == "init":
            self.log(f"gemini: session {event.get('session_id', '')}, model "
                     f"{event.get('model', '')}")

    def on_text(self, line: str) -> None:
        if not any(noise in line for noise in _NOISE) and not line.startswith("    at "):
            self.log(f"gemini: {line[:_SHOWN]}")

    def _flush(self) -> None:
        text, self._pending = "".join(self._pending), []
        for line in text.splitlines():
            if line.strip():
                self.log(line)

    def _on_tool_use(self, event: dict[str, Any]) -> None:
        name = str(event.get("tool_name", ""))
        params = event.get("parameters")
        target = _target(params if isinstance(params, dict) else {})
        self._calls[str(event.get("tool_id", ""))] = (name, target)
        self.answer = []  # the answer is what the model says after its last tool call
        self.log(f"{name} {target[:_SHOWN]}".rstrip())

    def _on_tool_result(self, event: dict[str, Any]) -> None:
        name, target = self._calls.get(str(event.get("tool_id", "")), ("tool", ""))
        output = str(event.get("output") or "").strip()
        if event.get("status") == "success":
            self.log(f"{name} ok" + (f": {output[-_SHOWN:]}" if output else ""))
            return
        raw = event.get("error")
        error: dict[str, Any] = raw if isinstance(raw, dict) else {}
        message = str(error.get("message") or output or "failed")
        if _is_denial(str(error.get("type", "")), message):
            self.denials.append(Denial(name, target, message,
                                       needs_human="ask a person" in message))
            self.log(f"denied: {name} {target[:_SHOWN]}: {message[:_SHOWN]}")
        else:
            self.log(f"{name} failed: {message[:_SHOWN]}")

    def _on_result(self, event: dict[str, Any]) -> None:
        self.status = str(event.get("status", ""))
        stats = event.get("stats")
        if isinstance(stats, dict):
            self.usage = Usage(input_tokens=int(stats.get("input_tokens") or 0),
                               output_tokens=int(stats.get("output_tokens") or 0))
        error = event.get("error")
        if isinstance(error, dict):
            self.failure = _api_message(str(error.get("message") or error.get("type") or ""))
            self.log(f"gemini: failed: {self.failure[:_SHOWN]}")
        else:
            self.log(f"gemini: {self.status}, {self.usage.input_tokens} input and "
                     f"{self.usage.output_tokens} output tokens, "
                     f"{_count(stats, 'tool_calls')} tool call(s)")

    def outcome(self, result: CommandResult) -> ToolOutcome:
        """How the run ended, from the `result` event and the exit code."""
        self._flush()
        output = _with_denials("".join(self.answer).strip(), self.denials)
        if self.status == "success" and result.exit_code == 0:
            return ToolOutcome(status="succeeded", output=output, usage=self.usage,
                               denials=tuple(self.denials))
        reason = self.failure or self.last_error or (
            f"gemini exited with code {result.exit_code} without a result")
        tail = _stderr_tail(result.stderr)
        error = (f"The Gemini CLI failed (exit code {result.exit_code}): {reason}"
                 + (f"\n--- stderr ---\n{tail}" if tail else ""))
        return ToolOutcome(status="failed", output=output, usage=self.usage, error=error,
                           denials=tuple(self.denials))


def _target(params: dict[str, Any]) -> str:
    for key in ("file_path", "command", "dir_path", "path", "pattern", "url", "query"):
        if key in params:
            return str(params[key])
    return json.dumps(params)[:_SHOWN] if params else ""


def _is_denial(kind: str, message: str) -> bool:
    return kind == "policy_violation" or message.startswith("Path not in workspace")


def _count(stats: Any, key: str) -> int:
    return int(stats.get(key) or 0) if isinstance(stats, dict) else 0


def _api_message(text: str) -> str:
    """The message inside "[API Error: {"error": {…}}]", with its code; else `text`."""
    inner = text.removeprefix("[API Error: ").removesuffix("]") if text.startswith(
        "[API Error: ") else text
    try:
        body = json.loads(inner)
    except ValueError:
        return inner
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict) or not error.get("message"):
        return inner
    code = " ".join(str(error[k]) for k in ("code", "status") if error.get(k))
    return f"{error['message']} (HTTP {code})" if code else str(error["message"])


def _with_denials(output: str, denials: list[Denial]) -> str:
    if not denials:
        return output
    listed = "\n".join(f"- {d.tool} {d.target}: {d.reason}" for d in denials)
    return f"{output}\n\nPermission denials:\n{listed}".strip()


def _stderr_tail(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()
             and not any(noise in line for noise in _NOISE) and not line.startswith("    at ")]
    return "\n".join(lines)[-_STDERR_TAIL:]


# ---- discovery ---------------------------------------------------------------------------


async def probe(settings: Settings) -> Probe:
    """Find the Gemini CLI and its version, and check there is a key (no model call)."""
    path = find_cli(settings.gemini_binary, settings)
    if path is None:
        return Probe(NAME, False, detail=f"{settings.gemini_binary!r} was not found on PATH"
                     f"{' or in ' + settings.tool_path if settings.tool_path else ''}.",
                     enable="Install it with `npm install -g @google/gemini-cli` (or "
                     "`make clis`), or point SHOAL_GEMINI_BINARY at it.")
    version = await cli_version(path, settings)
    if version is None:
        return Probe(NAME, False, detail=f"{path} did not report a version for --version.",
                     enable="Reinstall it with `npm install -g @google/gemini-cli`.")
    if settings.gemini_api_key is None and not settings.gemini_base_url:
        return Probe(NAME, False, version=version,
                     detail=f"Found {path}, but there is no Gemini API key.",
                     enable="Set GEMINI_API_KEY (or SHOAL_GEMINI_API_KEY) to a key from "
                     "https://aistudio.google.com/apikey, or point SHOAL_GEMINI_BASE_URL at "
                     "a Gemini-compatible server.")
    where = settings.gemini_base_url or "the Gemini API"
    return Probe(NAME, True, version=version,
                 detail=f"{path}, model {settings.gemini_model!r} via {where}")


def create(settings: Settings, probe: Probe) -> GeminiCliTool:
    """The tool for a successful `probe`."""
    binary = find_cli(settings.gemini_binary, settings) or settings.gemini_binary
    return GeminiCliTool(binary=binary, settings=settings, version=probe.version)
