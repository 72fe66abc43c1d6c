"""Which tools this worker offers, found from the settings.

Adapters are imported inside `discover_tools`, so a worker only loads what it will use.
"""

from __future__ import annotations

from collections.abc import Mapping

from shoal.config import Settings
from shoal.protocol import ToolInfo
from shoal.tools.base import Tool


def discover_tools(settings: Settings) -> dict[str, Tool]:
    """The tools this worker can run: always `echo`; `openai_compat` when a base URL is set."""
    from shoal.tools.echo import EchoTool

    tools: dict[str, Tool] = {"echo": EchoTool()}
    if settings.openai_compat_base_url:
        from shoal.tools.agent_loop import OpenAICompatTool

        tools["openai_compat"] = OpenAICompatTool(
            base_url=settings.openai_compat_base_url,
            api_key=settings.openai_compat_api_key,
            model=settings.openai_compat_model,
            max_turns=settings.agent_max_turns,
            command_timeout=settings.command_timeout,
        )
    return tools


def tool_infos(tools: Mapping[str, Tool]) -> list[ToolInfo]:
    """What a worker advertises about `tools` when it registers, sorted by name."""
    return [
        ToolInfo(name=name, version=getattr(tool, "version", None), local=tool.local)
        for name, tool in sorted(tools.items())
    ]
