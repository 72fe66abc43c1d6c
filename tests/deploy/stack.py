"""What the tests of the deployable stack share: where its files are, and the tools that check
them (Debian's docker-compose and haproxy, installed by `make deploy-tools`)."""

from __future__ import annotations

import asyncio
import contextlib
import csv
import io
import resource
import shutil
from collections.abc import AsyncIterator, Collection
from pathlib import Path

import httpx
import pytest

from tests.conftest import IN_CI

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"


def require_binary(name: str, package: str) -> str:
    """The path of `name` (also looked for in /usr/sbin); skip without it, fail under CI."""
    found = shutil.which(name) or next(
        (str(p) for p in (Path("/usr/sbin") / name, Path("/usr/bin") / name) if p.is_file()),
        None)
    if found:
        return found
    message = (f"`{name}` is not installed: run `make deploy-tools` (as root it installs "
               f"Debian's `{package}` package with apt-get) to run this check.")
    if IN_CI:
        pytest.fail(message)
    pytest.skip(message)


def local_config(copies: dict[str, str], public: int, internal: int) -> str:
    """deploy/haproxy.cfg with its two binds on 127.0.0.1 ports and one `server` line per copy
    (name → URL) at its address; its `maxconn` lowered only if this process may not open the
    two file descriptors per connection it needs (compose.yaml raises the container's limit
    instead); every other line as it is."""
    out: list[str] = []
    replaced = {"public": 0, "internal": 0, "servers": 0, "maxconn": 0}
    fds = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    for line in (DEPLOY / "haproxy.cfg").read_text().splitlines():
        stripped = line.strip()
        if stripped.startswith("maxconn "):
            wanted = int(stripped.split()[1])
            out.append(f"    maxconn {min(wanted, (fds - 100) // 2)}")
            replaced["maxconn"] += 1
        elif stripped == "bind :8000":
            out.append(f"    bind 127.0.0.1:{public}")
            replaced["public"] += 1
        elif stripped == "bind :8404":
            out.append(f"    bind 127.0.0.1:{internal}")
            replaced["internal"] += 1
        elif stripped.startswith("server shoal-"):
            if not replaced["servers"]:
                out += [f"    server {name} {url.removeprefix('http://')}"
                        for name, url in copies.items()]
            replaced["servers"] += 1
        else:
            out.append(line)
    assert replaced == {"public": 1, "internal": 1, "servers": 2, "maxconn": 1}, replaced
    return "\n".join(out) + "\n"


@contextlib.asynccontextmanager
async def haproxy(config: Path, log: Path) -> AsyncIterator[asyncio.subprocess.Process]:
    """HAProxy in the foreground on `config`, stopped on exit."""
    binary = require_binary("haproxy", "haproxy")
    with log.open("wb") as sink:
        proc = await asyncio.create_subprocess_exec(binary, "-db", "-f", str(config),
                                                    stdout=sink, stderr=sink)
        try:
            yield proc
        finally:
            if proc.returncode is None:
                proc.terminate()
            await proc.wait()


async def states(client: httpx.AsyncClient, internal: str,
                 names: Collection[str]) -> dict[str, str]:
    """The load balancer's view of each copy (`UP`, `DOWN`…), from its stats page."""
    try:
        resp = await client.get(f"{internal}/stats;csv")
    except httpx.TransportError:
        return {}  # not listening yet
    rows = csv.DictReader(io.StringIO(resp.text.removeprefix("# ")))
    return {r["svname"]: r["status"] for r in rows
            if r["pxname"] == "shoal" and r["svname"] in names}
