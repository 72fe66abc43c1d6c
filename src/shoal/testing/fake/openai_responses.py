"""(to be written) The openai_responses protocol for the fake model server."""

from __future__ import annotations

from starlette.routing import BaseRoute


def routes() -> list[BaseRoute]:
    return []
