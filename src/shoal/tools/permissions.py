"""What an agent may do without asking: the per-task permission policy.

The default: edits inside the workspace are allowed, nothing outside it, commands run (in the
workspace), and no tool is ever started with a skip-all-permissions flag. A task may tighten
this with `permissions` in its options, e.g. `{"edits": "ask", "commands": "deny"}`; `mcp`
rules the tools of the MCP servers a workflow's role names (unless allowed, the agent does not
get those servers).

`ask` means "a person decides". Until human checkpoints exist, an `ask` is answered "no" and
reported as a denial that needed a person (`needs_human=True`), so the quality loop can turn it
into a checkpoint without changing the adapters.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from shoal.errors import InvalidInput

Rule = Literal["allow", "deny", "ask"]
_RULES: tuple[Rule, ...] = ("allow", "deny", "ask")


@dataclass(frozen=True, slots=True)
class Decision:
    """The policy's answer to one request of an agent."""

    allowed: bool
    reason: str = ""
    needs_human: bool = False


@dataclass(frozen=True, slots=True)
class Denial:
    """A refused request, as reported in the attempt's log and result."""

    tool: str  # the agent's own tool name, e.g. "Write", "Bash"
    target: str  # the path or the command
    reason: str
    needs_human: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"tool": self.tool, "target": self.target, "reason": self.reason,
                "needs_human": self.needs_human}


@dataclass(frozen=True, slots=True)
class PermissionPolicy:
    """Rules for edits inside the workspace, commands and MCP tools; outside edits are always
    denied."""

    edits: Rule = "allow"
    commands: Rule = "allow"
    mcp: Rule = "allow"

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> PermissionPolicy:
        """The policy in a run's options (`options["permissions"]`), or the default."""
        raw = options.get("permissions")
        if raw is None:
            return cls()
        if not isinstance(raw, Mapping):
            raise InvalidInput("`permissions` must be an object like {\"edits\": \"allow\", "
                          "\"commands\": \"ask\"}.", details={"field": "permissions"})
        unknown = sorted(set(raw) - {"edits", "commands", "mcp"})
        if unknown:
            raise InvalidInput(f"Unknown permission {unknown[0]!r}: use 'edits', 'commands' or "
                               "'mcp'.", details={"field": f"permissions.{unknown[0]}"})
        values: dict[str, Rule] = {}
        for key in ("edits", "commands", "mcp"):
            value = raw.get(key, getattr(cls(), key))
            if value not in _RULES:
                raise InvalidInput(f"permissions.{key} must be one of allow, deny, ask; got "
                              f"{value!r}.", details={"field": f"permissions.{key}"})
            values[key] = value
        return cls(edits=values["edits"], commands=values["commands"], mcp=values["mcp"])

    def as_dict(self) -> dict[str, str]:
        return {"edits": self.edits, "commands": self.commands, "mcp": self.mcp}

    def edit(self, path: str, workspace: Path) -> Decision:
        """May the agent create or change the file at `path` (absolute or workspace-relative)?"""
        if not _inside(path, workspace):
            return Decision(False, f"{path} is outside the workspace {workspace}; agents may "
                            "only change files in their own workspace.")
        return _apply(self.edits, f"editing {path}")

    def read(self, path: str, workspace: Path) -> Decision:
        """May the agent read `path`? Inside the workspace yes; outside no."""
        if not _inside(path, workspace):
            return Decision(False, f"{path} is outside the workspace {workspace}.")
        return Decision(True)

    def command(self, command: str) -> Decision:
        """May the agent run this shell command (in the workspace)?"""
        return _apply(self.commands, f"running `{command[:200]}`")

    def mcp_tool(self, server: str, tool: str = "") -> Decision:
        """May the agent use a tool of the MCP server `server` (any of them, without `tool`)?"""
        return _apply(self.mcp, f"using the MCP server {server}" + (f" ({tool})" if tool else ""))


def _apply(rule: Rule, what: str) -> Decision:
    if rule == "allow":
        return Decision(True)
    if rule == "deny":
        return Decision(False, f"The task's permission policy denies {what}.")
    return Decision(False, f"The task's permission policy says to ask a person before {what}; "
                    "no one can be asked during this run, so it was denied.", needs_human=True)


def _inside(path: str, workspace: Path) -> bool:
    root = workspace.resolve()
    candidate = Path(path)
    target = candidate if candidate.is_absolute() else root / candidate
    try:
        resolved = target.resolve()
    except (OSError, RuntimeError):
        return False
    return resolved == root or root in resolved.parents
