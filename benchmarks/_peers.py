"""The peers of `bench_peers.py`: their own virtualenv and one subprocess per peer and database.

The peers (LangGraph and its SQLite and PostgreSQL checkpointers, DBOS, Celery) are never a
dependency of Shoal: they are installed, at the versions pinned in `peers/requirements.txt`,
into `benchmarks/.peers-venv` (not in git), made the first time and again whenever that file
changes. Each peer module (`peers/*_peer.py`) runs in that venv on a fresh database and prints
one JSON line: its makespans per workload, or the error that stopped it. A peer that cannot be
installed or run gets a row that says why; the others still run.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import sys
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from _compare import Role, Row
from _steal import counted
from _workloads import Workload
from bench_dag import database

HERE = Path(__file__).resolve().parent
VENV = Path(os.environ.get("SHOAL_BENCH_PEERS_VENV", HERE / ".peers-venv"))
REQUIREMENTS = HERE / "peers" / "requirements.txt"
INSTALL_SECONDS = 1200
PEER_SECONDS = 900  # one peer on one database, every workload and repeat


@dataclass(frozen=True, slots=True)
class Peer:
    """A peer module run with one configuration, on the databases it supports."""

    label: str
    script: str
    databases: tuple[str, ...] = ("sqlite", "postgres")
    variant: str = ""
    # Run in turn with Shoal through the API, a workload at a time (`Paired`): the peer the
    # issue's targets name, whose ratio to Shoal must not move with the machine's drift.
    paired: bool = False


PEERS = (
    Peer("LangGraph + SQLite checkpointer", "langgraph_peer.py", ("sqlite",), paired=True),
    Peer("LangGraph + PostgreSQL checkpointer", "langgraph_peer.py", ("postgres",),
         paired=True),
    Peer("DBOS", "dbos_peer.py"),
    Peer("Celery, database result backend", "celery_peer.py", variant="db"),
    Peer("Celery, Redis result backend", "celery_peer.py", variant="redis"),
)


def python() -> Path:
    """The peers' interpreter."""
    return VENV / "bin" / "python"


async def ensure_venv() -> str:
    """Make or refresh the peers' venv; '' when ready, else why it could not be made."""
    digest = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()
    marker = VENV / ".requirements-sha256"
    if python().exists() and marker.exists() and marker.read_text() == digest:
        return ""
    for argv in ([sys.executable, "-m", "venv", "--clear", str(VENV)],
                 [str(python()), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                  "-r", str(REQUIREMENTS)]):
        code, err = await _run(argv, INSTALL_SECONDS)
        if code != 0:
            return f"installing the peers failed ({' '.join(argv[-3:])}): {err}"
    marker.write_text(digest)
    return ""


async def _run(argv: list[str], within: float) -> tuple[int, str]:
    """Run `argv`; its exit code and the last line of its error output."""
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    try:
        _, err = await asyncio.wait_for(proc.communicate(), within)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return -1, f"timed out after {within:g} s"
    return proc.returncode or 0, _last_line(err)


def _last_line(text: bytes) -> str:
    lines = [line for line in text.decode(errors="replace").splitlines() if line.strip()]
    return lines[-1].strip()[:300] if lines else "no output"


@contextlib.asynccontextmanager
async def fresh(kind: str) -> AsyncIterator[str]:
    """A fresh SQLite file path or PostgreSQL URL (a database created and dropped)."""
    with tempfile.TemporaryDirectory(prefix="shoal-peer-") as name:
        if kind == "sqlite":
            yield str(Path(name) / "peer.db")
            return
        async with database(kind, Path(name)) as url:
            yield url


async def peer_row(peer: Peer, kind: str, quick: bool, repeat: int, only: str,
                   warm_runs: int = 0) -> Row:
    """`peer` on a fresh database of `kind` (`warm_runs` unmeasured runs of each workload
    before its measured ones): its row, with its makespans or why it failed."""
    row = Row(peer.label, Role.PEER)
    async with fresh(kind) as url:
        argv = [str(python()), str(HERE / "peers" / peer.script), "--db", kind, "--url", url,
                "--repeat", str(repeat), "--warm-runs", str(warm_runs),
                *(["--quick"] if quick else []),
                *(["--only", only] if only else []),
                *(["--variant", peer.variant] if peer.variant else [])]
        proc = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        try:
            out, err = await asyncio.wait_for(proc.communicate(), PEER_SECONDS)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            row.failed = f"timed out after {PEER_SECONDS} s"
            return row
    return read_result(row, out, err)


def read_result(row: Row, out: bytes, err: bytes) -> Row:
    """Fill `row` from a peer module's JSON line (or say why there is none)."""
    lines = [line for line in out.decode(errors="replace").splitlines() if line.startswith("{")]
    if not lines:
        row.failed = f"no result: {_last_line(err)}"
        return row
    doc = json.loads(lines[-1])
    versions = " ".join(f"{k} {v}" for k, v in doc.get("versions", {}).items()
                        if v != "missing")
    row.note = "; ".join([versions, *doc.get("notes", [])])
    if "error" in doc:
        row.failed = doc["error"]
        return row
    row.seconds = {key: list(r["seconds"]) for key, r in doc["results"].items()}
    return row


async def peer_rows(kind: str, quick: bool, repeat: int, only: str, *,
                    paired: bool | None = None) -> list[Row]:
    """Every peer that supports `kind` (with `paired`, only those that are, or are not,
    run in turn with Shoal), one after the other; a row each."""
    broken = await ensure_venv()
    peers = [p for p in PEERS if kind in p.databases and paired in (None, p.paired)]
    if broken:
        return [Row(p.label, Role.PEER, failed=broken) for p in peers]
    return [await peer_row(p, kind, quick, repeat, only) for p in peers]


class Paired:
    """The peers run in turn with Shoal through the API: after each of Shoal's runs, one run of
    the same workload by each of them (`run`, its `between`), each on a fresh database, in
    a process of its own, measured after the warm-up a peer's whole run has and one unmeasured
    run of the workload itself (as each of Shoal's measured runs then follows one)."""

    def __init__(self, kind: str, quick: bool) -> None:
        self.kind, self.quick = kind, quick
        self.peers = [p for p in PEERS if p.paired and kind in p.databases]
        self.rows = {p.label: Row(p.label, Role.PEER) for p in self.peers}
        self.broken: str | None = None

    async def run(self, work: Workload) -> None:
        """One run of `work` by each peer; a peer that failed once is not run again."""
        if self.broken is None:
            self.broken = await ensure_venv()
        for peer in self.peers:
            row = self.rows[peer.label]
            if self.broken:
                row.failed = self.broken
            if row.failed:
                continue
            with counted(row.steal):  # its process's whole life: the warm-up runs too
                one = await peer_row(peer, self.kind, self.quick, 1, work.key, warm_runs=1)
            row.note, row.failed = one.note, one.failed
            for key, seconds in one.seconds.items():
                row.seconds.setdefault(key, []).extend(seconds)
