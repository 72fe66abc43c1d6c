"""(to be written) The ollama protocol for the fake model server."""

from __future__ import annotations

from starlette.routing import BaseRoute


def routes() -> list[BaseRoute]:
    return []
