"""A role's MCP servers, handed to whichever agent runs the attempt.

A workflow document's role may name MCP servers (a command and its arguments, or a URL); the
attempt carries them (`ToolRun.mcp_servers`). Each tool hands them on in its own way:

- Claude Code: `--mcp-config` with `{"mcpServers": {…}}` (and `--strict-mcp-config`, so only
  these); its permission prompts for `mcp__<server>__<tool>` go through the policy's `mcp` rule;
- Codex: `-c mcp_servers.<name>.command=…` overrides of its per-run config, its tools approved
  up front (`exec` cannot ask anyone);
- Gemini CLI: `mcpServers` in the per-run settings file;
- Shoal's agent loop: `McpTools`, a client per server through the official `mcp` SDK, its tools
  offered to the model as `<server>__<tool>`.

The command `shoal` is the worker's own Shoal (`python -m shoal`), so the bundled servers
(`shoal mcp places`) run wherever a worker does. Every stdio server gets `SHOAL_WORKSPACE`, the
attempt's workspace, where the bundled ones write their files (and its working directory is the
workspace too). With the policy's `mcp` rule not `allow`, `allowed` hands on no server, and the
refusal is reported as a denial.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcp import Client, StdioServerParameters

from shoal.protocol import McpServer
from shoal.tools.base import ToolRun
from shoal.tools.models.base import ToolDef
from shoal.tools.permissions import Denial, PermissionPolicy

SEPARATOR = "__"  # the agent loop's MCP tool names: <server>__<tool>
MAX_RESULT_CHARS = 20_000


@dataclass(frozen=True, slots=True)
class Launch:
    """How to start a stdio server: the command, its arguments and environment."""

    command: str
    args: tuple[str, ...]
    env: dict[str, str]


# What a bundled server (`shoal mcp …`) takes from the worker's environment: how `sources`
# embeds text and extracts its graph (no secret but the keys of the providers it calls), where
# indexes live, and which literature APIs `literature` asks and how politely.
BUNDLED_ENV = ("SHOAL_EMBEDDING_PROVIDER", "SHOAL_EMBEDDING_MODEL", "SHOAL_EMBEDDING_BATCH",
               "SHOAL_EMBEDDING_TIMEOUT", "SHOAL_OPENAI_COMPAT_BASE_URL",
               "SHOAL_OPENAI_COMPAT_MODEL", "SHOAL_OPENAI_COMPAT_API_KEY",
               "SHOAL_OPENAI_BASE_URL", "OLLAMA_HOST", "SHOAL_INDEX_DIR",
               "SHOAL_LITERATURE_ARXIV_URL", "SHOAL_LITERATURE_CROSSREF_URL",
               "SHOAL_LITERATURE_MAILTO", "SHOAL_LITERATURE_INTERVAL",
               "SHOAL_LITERATURE_TIMEOUT", "SHOAL_LITERATURE_MAX_RETRIES",
               "SHOAL_LITERATURE_RETRY_BASE", "SHOAL_LITERATURE_RETRY_CAP")


def launch(server: McpServer, workspace: Path) -> Launch:
    """The command line of a stdio `server` on this worker. A bundled one (`shoal mcp …`)
    also gets the worker's embedding settings, and keeps its search indexes in the worker's
    data folder (`index/`), where later tasks over the same files find them."""
    assert server.command is not None
    command, args = server.command, tuple(server.args)
    env = {**server.env, "SHOAL_WORKSPACE": str(workspace)}
    if command == "shoal":
        command, args = sys.executable, ("-m", "shoal", *args)
        data = Path(os.environ.get("SHOAL_DATA_DIR") or ".shoal").resolve()
        env = {"SHOAL_INDEX_DIR": str(data / "index"),
               **{k: v for k in BUNDLED_ENV if (v := os.environ.get(k))}, **env}
        if os.environ.get("SHOAL_EMBEDDING_PROVIDER") == "openai" and "OPENAI_API_KEY" in \
                os.environ:
            env.setdefault("OPENAI_API_KEY", os.environ["OPENAI_API_KEY"])
    return Launch(command, args, env)


def allowed(run: ToolRun, policy: PermissionPolicy) -> tuple[list[McpServer], list[Denial]]:
    """The run's servers the policy lets the agent use, and a denial for each it does not."""
    servers: list[McpServer] = []
    denials: list[Denial] = []
    for server in run.mcp_servers:
        decision = policy.mcp_tool(server.name)
        if decision.allowed:
            servers.append(server)
        else:
            denials.append(Denial(tool="mcp", target=server.name, reason=decision.reason,
                                  needs_human=decision.needs_human))
            run.log(f"mcp {server.name} denied: {decision.reason}")
    return servers, denials


def claude_config(servers: Sequence[McpServer], workspace: Path) -> dict[str, Any]:
    """Claude Code's `--mcp-config` document."""
    out: dict[str, Any] = {}
    for server in servers:
        if server.url is not None:
            out[server.name] = {"type": "http", "url": server.url}
        else:
            how = launch(server, workspace)
            out[server.name] = {"type": "stdio", "command": how.command, "args": list(how.args),
                                "env": how.env}
    return {"mcpServers": out}


def gemini_settings(servers: Sequence[McpServer], workspace: Path) -> dict[str, Any]:
    """The `mcpServers` entry of Gemini CLI's settings."""
    out: dict[str, Any] = {}
    for server in servers:
        if server.url is not None:
            out[server.name] = {"httpUrl": server.url, "trust": True}
        else:
            how = launch(server, workspace)
            out[server.name] = {"command": how.command, "args": list(how.args), "env": how.env,
                                "cwd": str(workspace), "trust": True}
    return out


def codex_overrides(servers: Sequence[McpServer], workspace: Path) -> list[str]:
    """Codex's `-c key=value` arguments (values in TOML, which JSON strings and lists are).
    Its tools are approved up front (`exec` can ask no one): the policy allowed the server.
    Each is `required`: Codex waits for it to start before the first model request (else a
    slow start leaves the model without its tools) and fails the run if it cannot start."""
    argv: list[str] = []
    for server in servers:
        key = f"mcp_servers.{server.name}"
        argv += ["-c", f'{key}.default_tools_approval_mode="approve"',
                 "-c", f"{key}.required=true"]
        if server.url is not None:
            argv += ["-c", f"{key}.url={json.dumps(server.url)}"]
            continue
        how = launch(server, workspace)
        env = ", ".join(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in how.env.items())
        argv += ["-c", f"{key}.command={json.dumps(how.command)}",
                 "-c", f"{key}.args={json.dumps(list(how.args))}",
                 "-c", f"{key}.env={{ {env} }}"]
    return argv


@dataclass
class McpTools:
    """The tools of the run's MCP servers, for the agent loop: offered as `<server>__<tool>`."""

    defs: list[ToolDef] = field(default_factory=list)
    _clients: dict[str, Client] = field(default_factory=dict)

    def owns(self, name: str) -> bool:
        return name.split(SEPARATOR, 1)[0] in self._clients and SEPARATOR in name

    async def call(self, name: str, arguments: dict[str, Any]) -> str:
        """Call the tool `name`; its text content (or the error it reports)."""
        server, tool = name.split(SEPARATOR, 1)
        result = await self._clients[server].call_tool(tool, arguments)
        texts = [getattr(block, "text", "") for block in result.content]
        text = "\n".join(t for t in texts if t) or json.dumps(result.structured_content or {})
        prefix = "Error: " if result.is_error else ""
        return (prefix + text)[:MAX_RESULT_CHARS]


@contextlib.asynccontextmanager
async def connected(servers: Sequence[McpServer], workspace: Path) -> AsyncIterator[McpTools]:
    """Start (or reach) every server, list its tools, and close them all at the end."""
    tools = McpTools()
    async with contextlib.AsyncExitStack() as stack:
        for server in servers:
            if server.url is not None:
                target: StdioServerParameters | str = server.url
            else:
                how = launch(server, workspace)
                target = StdioServerParameters(command=how.command, args=list(how.args),
                                               env=how.env, cwd=str(workspace))
            client = await stack.enter_async_context(Client(target, read_timeout_seconds=60))
            tools._clients[server.name] = client
            for tool in (await client.list_tools()).tools:
                tools.defs.append(ToolDef(f"{server.name}{SEPARATOR}{tool.name}",
                                          tool.description or tool.name,
                                          dict(tool.input_schema)))
        yield tools
