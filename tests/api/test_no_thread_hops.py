"""No request waits for a worker thread to run Shoal's own code: FastAPI runs a plain
function, an endpoint or a dependency, on a thread of its pool (a hop there and back, about a
tenth of a signed-in request here: `benchmarks/README.md`, the nineteenth round), so every
endpoint and every dependency of every route is a coroutine. Generated from the app's routes:
a route added later is checked without anyone listing it."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute, APIWebSocketRoute

from shoal.api.app import create_app
from tests.conftest import make_settings


def _calls(dependant: Dependant) -> Iterator[Any]:
    for sub in dependant.dependencies:
        if sub.call is not None:
            yield sub.call
        yield from _calls(sub)


def _routes(routes: list[Any]) -> Iterator[APIRoute | APIWebSocketRoute]:
    """Every route, those of included routers too (FastAPI keeps an included router whole,
    as `original_router`)."""
    for route in routes:
        if isinstance(route, APIRoute | APIWebSocketRoute):
            yield route
        elif (inner := getattr(route, "original_router", None)) is not None:
            yield from _routes(inner.routes)


def _asynchronous(call: Any) -> bool:
    if inspect.iscoroutinefunction(call) or inspect.isasyncgenfunction(call):
        return True
    if inspect.isclass(call):
        return False
    # An instance that is called (`HTTPBearer`): the `__call__` its class defines or inherits.
    owner = next(k for k in type(call).__mro__ if "__call__" in vars(k))
    return inspect.iscoroutinefunction(vars(owner)["__call__"])


def test_every_endpoint_and_dependency_is_a_coroutine(tmp_path: Path) -> None:
    app = create_app(make_settings(tmp_path))
    routes = list(_routes(app.routes))
    assert len(routes) > 60  # the API's, not only the pages'
    everywhere = [d.dependency for d in app.router.dependencies]  # `checked_path`
    assert everywhere
    blocking = sorted(
        {f"{route.path}: {getattr(call, '__qualname__', repr(call))}"
         for route in routes
         for call in (route.endpoint, *_calls(route.dependant), *everywhere)
         if not _asynchronous(call)})
    assert blocking == []
