"""How a step runs: the engine's own settings of a subtask (typed) beside its tool's options,
stored as one JSON object, and the parts they are made of (its MCP servers, a correction)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class McpServerSpec:
    """An MCP server a step's agent may use: a command to start (stdio), or a URL to reach.
    The command `shoal` means the worker's own Shoal (its bundled servers: `shoal mcp …`)."""

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    url: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name}
        if self.command is not None:
            out |= {"command": self.command, "args": list(self.args)}
        if self.url is not None:
            out["url"] = self.url
        if self.env:
            out["env"] = dict(self.env)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> McpServerSpec:
        return cls(name=str(data["name"]), command=data.get("command"),
                   args=tuple(data.get("args") or ()), url=data.get("url"),
                   env=dict(data.get("env") or {}))


@dataclass(frozen=True, slots=True)
class Correction:
    """What a `correct` step is asked to change, and why."""

    source: str  # review | human | approval
    issues: tuple[Mapping[str, Any], ...] = ()  # a peer review's findings
    instructions: str = ""  # the reviewer's fix instructions
    guidance: str = ""  # a person's
    correction_type: str = ""
    reference_files: tuple[str, ...] = ()
    previous_output: str = ""  # the corrected step's summary before the fix

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "issues": [dict(i) for i in self.issues],
                "instructions": self.instructions, "guidance": self.guidance,
                "correction_type": self.correction_type,
                "reference_files": list(self.reference_files),
                "previous_output": self.previous_output}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Correction:
        return cls(source=str(data.get("source", "")),
                   issues=tuple(i for i in data.get("issues") or () if isinstance(i, Mapping)),
                   instructions=str(data.get("instructions") or ""),
                   guidance=str(data.get("guidance") or ""),
                   correction_type=str(data.get("correction_type") or ""),
                   reference_files=tuple(str(f) for f in data.get("reference_files") or ()),
                   previous_output=str(data.get("previous_output") or ""))


@dataclass(frozen=True, slots=True)
class StepOptions:
    """How a step runs: the engine's own settings, typed, and the tool's options (`tool`),
    handed to the worker as they are. Stored as one JSON object (`to_json`), the engine's keys
    beside the tool's; a key of the engine's with a value of another type stays the tool's."""

    round: int | None = None  # quality steps: which evaluation or review round
    cycle: int | None = None  # reviews: which review cycle
    repair: str | None = None  # a judge or reviewer asked again: why its answer was refused
    correction: Correction | None = None  # `correct` steps
    exclude_workers: tuple[str, ...] | None = None  # reviews: never the author's worker
    pinned_worker: str | None = None  # only this worker may run it
    prefer_worker: str | None = None  # this worker if it can
    seq: int | None = None  # document steps: this run's place among the task's runs
    looped: bool = False  # document steps: a loop went back from this run
    mcp_servers: tuple[McpServerSpec, ...] = ()  # document steps: their role's MCP servers
    output_file: str | None = None  # document steps: the file their answer also becomes
    plan_type: str | None = None  # typed plans: the task's type (its gate's steps: the same)
    wave: int | None = None  # typed plans: the task's topological layer, from 0
    gap: str | None = None  # typed plans: why the task was skipped (its answer is a gap)
    # typed plans with sub-questions: the planner's run holds them, (id, question) each; a
    # planned task, the ids of those it serves
    questions: tuple[tuple[str, str], ...] = ()
    serves: tuple[str, ...] = ()
    tool: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out = dict(self.tool)
        if self.round is not None:
            out["round"] = self.round
        if self.cycle is not None:
            out["cycle"] = self.cycle
        if self.repair is not None:
            out["repair"] = self.repair
        if self.pinned_worker is not None:
            out["pinned_worker"] = self.pinned_worker
        if self.prefer_worker is not None:
            out["prefer_worker"] = self.prefer_worker
        if self.seq is not None:
            out["seq"] = self.seq
        if self.looped:
            out["looped"] = True
        if self.correction is not None:
            out["correction"] = self.correction.to_json()
        if self.exclude_workers is not None:
            out["exclude_workers"] = list(self.exclude_workers)
        if self.mcp_servers:
            out["mcp_servers"] = [s.to_json() for s in self.mcp_servers]
        if self.output_file is not None:
            out["output_file"] = self.output_file
        if self.plan_type is not None:
            out["plan_type"] = self.plan_type
        if self.wave is not None:
            out["wave"] = self.wave
        if self.gap is not None:
            out["gap"] = self.gap
        if self.questions:
            out["questions"] = [{"id": q, "question": text} for q, text in self.questions]
        if self.serves:
            out["serves"] = list(self.serves)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any], **ours: Any) -> StepOptions:
        """The options `data` holds (as `to_json` wrote them, or as a user sent them: what is
        not Shoal's is the tool's), with `ours` set over them."""
        tool = dict(data)
        found: dict[str, Any] = {}
        for name, fits in _OPTION_TYPES.items():
            if name in tool and fits(tool[name]):
                found[name] = tool.pop(name)
        if "correction" in found:
            found["correction"] = Correction.from_json(found["correction"])
        if "exclude_workers" in found:
            found["exclude_workers"] = tuple(found["exclude_workers"])
        if "mcp_servers" in found:
            found["mcp_servers"] = tuple(McpServerSpec.from_json(s) for s in found["mcp_servers"])
        if "questions" in found:
            found["questions"] = tuple((q["id"], q["question"]) for q in found["questions"])
        if "serves" in found:
            found["serves"] = tuple(found["serves"])
        if ours:
            found.update(ours)
        return cls(**found, tool=tool)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_str(value: Any) -> bool:
    return isinstance(value, str)


def _is_strs(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _is_true(value: Any) -> bool:
    return value is True


def _is_object(value: Any) -> bool:
    return isinstance(value, Mapping)


def _is_questions(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(v, Mapping) and isinstance(v.get("id"), str)
        and isinstance(v.get("question"), str) for v in value)


def _is_servers(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(v, Mapping) and isinstance(v.get("name"), str) for v in value)


_OPTION_TYPES: dict[str, Callable[[Any], bool]] = {
    "round": _is_int, "cycle": _is_int, "repair": _is_str, "correction": _is_object,
    "exclude_workers": _is_strs, "pinned_worker": _is_str, "prefer_worker": _is_str,
    "seq": _is_int, "looped": _is_true, "mcp_servers": _is_servers, "output_file": _is_str,
    "plan_type": _is_str, "wave": _is_int, "gap": _is_str, "questions": _is_questions,
    "serves": _is_strs}
