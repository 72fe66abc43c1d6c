"""Upload throughput and the control plane's memory while it takes a large file.

    .venv/bin/python benchmarks/bench_uploads.py [--sizes 10,100] [--repeat 2]

Starts a real `shoal serve` (SQLite) in its own process, signs in, and uploads a CSV file of
each size (MB) through `POST /api/v1/uploads`, streamed from disk by httpx. Prints, per size,
the throughput (MB/s, the whole request: multipart parsing, hashing, sniffing, checking and
text extraction, the move into the store), the floor beside it (the same bytes copied to a
new file and fsynced, in the same run), and the server's peak resident memory (`VmHWM`) after
that size: taking a file must not make the server grow with the file.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from rich.console import Console
from rich.table import Table

SHOAL = str(Path(sys.executable).with_name("shoal"))
MB = 1024 * 1024


def _csv(path: Path, size: int) -> None:
    """A CSV file of about `size` bytes."""
    row = b"2026-11-26,Oslo,cats,12,a note of some length to make the rows realistic\n"
    with path.open("wb") as out:
        out.write(b"date,city,animal,count,note\n")
        written = 0
        while written < size:
            out.write(row * 1000)
            written += len(row) * 1000


def _peak_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def _floor(path: Path, into: Path) -> float:
    """Seconds to copy `path` to a new file in `into` and make it durable."""
    start = time.perf_counter()
    target = into / "floor.copy"
    shutil.copyfile(path, target)
    with target.open("rb") as file:
        os.fsync(file.fileno())
    took = time.perf_counter() - start
    target.unlink()
    return took


async def _server(tmp: Path) -> tuple[subprocess.Popen[bytes], str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHOAL_")}
    env.update(SHOAL_DATA_DIR=str(tmp / "data"), SHOAL_MODE="dev", SHOAL_BCRYPT_ROUNDS="4",
               SHOAL_MAX_UPLOAD_BYTES=str(1024 * MB),
               SHOAL_MAX_USER_UPLOAD_BYTES=str(64 * 1024 * MB))
    await asyncio.to_thread(subprocess.run, [SHOAL, "user", "create", "--username", "bench",
                                             "--password", "password123"],
                            env=env, check=True, capture_output=True)
    port = 18000 + os.getpid() % 1000
    proc = await asyncio.to_thread(subprocess.Popen, [SHOAL, "serve", "--port", str(port)],
                                   env=env, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    async with httpx.AsyncClient() as probe:
        for _ in range(200):
            try:
                if (await probe.get(f"{url}/healthz")).status_code == 200:
                    return proc, url
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.1)
    proc.kill()
    raise RuntimeError("the server did not start")


async def main(args: argparse.Namespace) -> None:
    console = Console()
    table = Table(title="Uploads (POST /api/v1/uploads, SQLite)", title_justify="left")
    for col in ("file", "upload", "floor (copy + fsync)", "÷ floor", "server peak RSS"):
        table.add_column(col, justify="right")
    with tempfile.TemporaryDirectory(prefix="shoal-uploads-") as name:
        tmp = Path(name)
        proc, url = await _server(tmp)
        try:
            async with httpx.AsyncClient(base_url=url, timeout=600) as client:
                token = (await client.post("/api/v1/auth/login", json={
                    "username": "bench", "password": "password123"})).json()["access_token"]
                client.headers["Authorization"] = f"Bearer {token}"
                table.add_row("(started)", "", "", "", f"{_peak_kb(proc.pid) / 1024:.0f} MB")
                for size in [int(s) for s in args.sizes.split(",")]:
                    path = tmp / f"data-{size}.csv"
                    _csv(path, size * MB)
                    real = path.stat().st_size / MB
                    for run in range(args.repeat):
                        with path.open("rb") as file:
                            start = time.perf_counter()
                            resp = await client.post("/api/v1/uploads", files=[
                                ("file", (f"data-{size}-{run}.csv", file, "text/csv"))])
                            took = time.perf_counter() - start
                        resp.raise_for_status()
                        floor = _floor(path, tmp)
                        table.add_row(f"{real:.0f} MB", f"{real / took:.0f} MB/s",
                                      f"{real / floor:.0f} MB/s", f"{took / floor:.1f} x",
                                      f"{_peak_kb(proc.pid) / 1024:.0f} MB")
                    path.unlink()
        finally:
            proc.terminate()
            proc.wait(10)
    console.print(table)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="10,100", help="file sizes in MB, comma-separated")
    parser.add_argument("--repeat", type=int, default=2)
    asyncio.run(main(parser.parse_args()))
