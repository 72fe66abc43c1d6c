"""Python calls of a cProfile run counted per layer of the control plane.

A function of Shoal counts to the layer of its module (`shoal/runtime/…` → runtime); a few
libraries count to the layer that owns them (SQLAlchemy and the database drivers → store;
uvicorn, websockets and h11 → protocol/sockets; FastAPI and Starlette → api; asyncio's loop →
loop). Everything else — built-ins, the standard library's helpers (uuid, enum, json, datetime,
dataclasses…), pydantic, structlog — counts to the layer that called it, shared out by the
callers' call counts (cProfile records one level of callers; a helper called by a helper is
followed up the chain). So `runtime` includes the `uuid.__hash__` and `dict.get` the runtime's
code makes, and `own` is only its own functions.
"""

from __future__ import annotations

import pstats
from collections import defaultdict
from typing import Any

Func = tuple[str, int, str]

LAYERS = ("api", "runtime", "engine", "workflows", "store", "bus", "metrics", "events",
          "protocol/sockets", "worker", "loop (asyncio)", "client (benchmark)", "other")

SHOAL = {  # first part of the module path under shoal/ → layer
    "api": "api", "runtime": "runtime", "engine": "engine", "workflows": "workflows",
    "store": "store", "bus": "bus", "metrics.py": "metrics", "events.py": "events",
    "protocol.py": "protocol/sockets", "worker": "worker",
}
LIBRARIES = {  # a site-packages package → layer
    "sqlalchemy": "store", "aiosqlite": "store", "asyncpg": "store", "sqlite3": "store",
    "uvicorn": "protocol/sockets", "websockets": "protocol/sockets", "h11": "protocol/sockets",
    "httptools": "protocol/sockets", "wsproto": "protocol/sockets",
    "fastapi": "api", "starlette": "api", "prometheus_client": "metrics", "redis": "bus",
    "httpx": "client (benchmark)", "httpcore": "client (benchmark)",
}
STDLIB_OWNED = {"asyncio": "loop (asyncio)", "selectors.py": "loop (asyncio)",
                "sqlite3": "store"}


def direct_layer(func: Func) -> str | None:
    """The layer `func` belongs to by its own module, or None when it counts to its caller."""
    path = func[0].replace("\\", "/")
    if "/src/shoal/" in path:
        first = path.split("/src/shoal/", 1)[1].split("/")[0]
        return SHOAL.get(first, "other")
    if "/benchmarks/" in path:
        return "client (benchmark)"
    if "/site-packages/" in path:
        package = path.split("/site-packages/", 1)[1].split("/")[0]
        return LIBRARIES.get(package)
    if "/lib/python3" in path:
        first = path.split("/lib/python3", 1)[1].split("/")[1]
        return STDLIB_OWNED.get(first)
    return None  # a built-in ('~'), or code of unknown origin


class Layers:
    """The calls of a `pstats.Stats` per layer: `own` (the layer's functions) and `total`
    (with the helpers they called)."""

    def __init__(self, stats: pstats.Stats) -> None:
        self._stats: dict[Func, Any] = stats.stats  # type: ignore[attr-defined]
        self._memo: dict[Func, dict[str, float]] = {}
        self.own: dict[str, float] = defaultdict(float)
        self.total: dict[str, float] = defaultdict(float)
        for func, (_cc, nc, _tt, _ct, _callers) in self._stats.items():
            layer = direct_layer(func)
            if layer is not None:
                self.own[layer] += nc
            for name, share in self._shares(func).items():
                self.total[name] += nc * share

    def _shares(self, func: Func) -> dict[str, float]:
        """How the calls of `func` split among layers (fractions summing to 1)."""
        if (layer := direct_layer(func)) is not None:
            return {layer: 1.0}
        if func in self._memo:
            return self._memo[func]
        self._memo[func] = {"other": 1.0}  # a cycle of helpers counts to other
        callers = self._stats[func][4]
        count = sum(c[1] if isinstance(c, tuple) else c for c in callers.values())
        if not count:
            return self._memo[func]
        shares: dict[str, float] = defaultdict(float)
        for caller, c in callers.items():
            n = c[1] if isinstance(c, tuple) else c
            for name, part in self._shares(caller).items():
                shares[name] += part * n / count
        self._memo[func] = dict(shares)
        return self._memo[func]
