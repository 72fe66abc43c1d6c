"""Which tools this worker offers: discovery at start, with a reason for each one missing.

Every adapter has a probe (is the CLI on PATH, which version, is there an API key, does the
Ollama server answer) and a factory. `discover_tools` runs the probes concurrently and builds
the tools that are available (restricted to `SHOAL_TOOLS` when set); `shoal worker --check`
prints the probes. Adapters are imported lazily, so a worker only loads what it uses.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Awaitable, Callable, Mapping
from typing import cast

from shoal.config import Settings
from shoal.protocol import ToolInfo
from shoal.tools.base import Probe, Tool

# tool name → (module, probe function, factory function)
ADAPTERS: dict[str, tuple[str, str, str]] = {
    "echo": ("shoal.tools.echo", "probe", "create"),
    "evaluator": ("shoal.tools.evaluator", "probe", "create"),
    "citations": ("shoal.tools.citations", "probe", "create"),
    "claude_code": ("shoal.tools.claude_code", "probe", "create"),
    "gemini_cli": ("shoal.tools.gemini_cli", "probe", "create"),
    "codex": ("shoal.tools.codex", "probe", "create"),
    "openai_compat": ("shoal.tools.api_tools", "probe_openai_compat", "create_openai_compat"),
    "openai": ("shoal.tools.api_tools", "probe_openai", "create_openai"),
    "anthropic": ("shoal.tools.api_tools", "probe_anthropic", "create_anthropic"),
    "gemini": ("shoal.tools.api_tools", "probe_gemini", "create_gemini"),
    "ollama": ("shoal.tools.api_tools", "probe_ollama", "create_ollama"),
}

ProbeFn = Callable[[Settings], Awaitable[Probe]]
CreateFn = Callable[[Settings, Probe], Tool]


ALWAYS = ("citations",)  # Shoal's own code, which its workflows' checks need on every worker
BUILT_IN = frozenset({"echo", "evaluator", "citations"})  # Shoal's own tools: no AI in them


def _wanted(settings: Settings) -> list[str]:
    if settings.tools is None:
        return list(ADAPTERS)
    return [*ALWAYS, *(name for name in settings.tools if name in ADAPTERS
                       and name not in ALWAYS)]


async def _probe(name: str, settings: Settings) -> Probe:
    module, probe_name, _ = ADAPTERS[name]
    try:
        probe = cast(ProbeFn, getattr(importlib.import_module(module), probe_name))
        return await probe(settings)
    except Exception as exc:  # a broken adapter must not stop the worker from starting
        return Probe(name, False, detail=f"the probe failed: {type(exc).__name__}: {exc}",
                     enable="see the worker log")


async def probe_tools(settings: Settings) -> list[Probe]:
    """Probe every tool (or those in `SHOAL_TOOLS`), concurrently, in a fixed order."""
    names = _wanted(settings)
    probes = await asyncio.gather(*(_probe(name, settings) for name in names))
    unknown = sorted(set(settings.tools or ()) - set(ADAPTERS))
    probes.extend(Probe(name, False, detail="Shoal has no tool of this name",
                        enable=f"use one of: {', '.join(ADAPTERS)}") for name in unknown)
    return list(probes)


def create_tools(settings: Settings, probes: list[Probe]) -> dict[str, Tool]:
    """Build the tools whose probe found them available."""
    tools: dict[str, Tool] = {}
    for probe in probes:
        if not probe.available or probe.name not in ADAPTERS:
            continue
        module, _, create_name = ADAPTERS[probe.name]
        create = cast(CreateFn, getattr(importlib.import_module(module), create_name))
        tools[probe.name] = create(settings, probe)
    return tools


async def discover_tools(settings: Settings) -> dict[str, Tool]:
    """The tools this worker can run."""
    return create_tools(settings, await probe_tools(settings))


def tool_infos(tools: Mapping[str, Tool]) -> list[ToolInfo]:
    """What a worker advertises about `tools` when it registers, sorted by name."""
    return [
        ToolInfo(name=name, version=getattr(tool, "version", None), local=tool.local)
        for name, tool in sorted(tools.items())
    ]
