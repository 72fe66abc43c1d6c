"""Simulated workers for `bench_load.py`: N WebSocket connections to `/ws/worker`, each
registered as a machine of its own, heartbeating every `--interval` seconds (phases spread
evenly) until standard input closes. Prints one line, `connected N`, once all are registered.

    python benchmarks/_load_workers.py --url http://127.0.0.1:8000 --token shw_… --count 1000
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import uuid

from websockets.asyncio.client import connect

OPENING = 100  # connections being opened at once


async def one(url: str, token: str, index: int, interval: float, phase: float,
              ready: asyncio.Semaphore, registered: asyncio.Event, count: list[int],
              total: int, stop: asyncio.Event) -> None:
    async with ready:
        ws = await connect(url, additional_headers={"Authorization": f"Bearer {token}"},
                           open_timeout=60, max_size=2**24)
        await ws.send(json.dumps({
            "type": "worker_register", "machine_id": f"load-{uuid.uuid4().hex}",
            "machine_name": f"load-{index}", "tools": [{"name": "echo", "local": False}],
            "slots": 1, "features": ["acks", "batches"]}))
        while json.loads(await ws.recv()).get("type") != "registered":
            pass
    count[0] += 1
    if count[0] == total:
        registered.set()
    await registered.wait()
    await asyncio.sleep(phase)
    beat = json.dumps({"type": "heartbeat", "cpu_percent": 1.0, "memory_percent": 10.0,
                       "disk_percent": 20.0, "running": []})
    reader = asyncio.create_task(_drain(ws))
    try:
        while not stop.is_set():
            await ws.send(beat)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval)
    finally:
        reader.cancel()
        await ws.close()


async def _drain(ws: object) -> None:
    async for _ in ws:  # type: ignore[attr-defined]
        pass


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--interval", type=float, default=10.0)
    args = parser.parse_args()
    url = args.url.replace("http://", "ws://") + "/ws/worker"
    stop, registered = asyncio.Event(), asyncio.Event()
    ready = asyncio.Semaphore(OPENING)
    count = [0]
    tasks = [asyncio.create_task(one(url, args.token, i, args.interval,
                                     args.interval * i / args.count, ready, registered, count,
                                     args.count, stop)) for i in range(args.count)]
    await registered.wait()
    print(f"connected {args.count}", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    stop.set()
    await asyncio.gather(*tasks, return_exceptions=True)


if __name__ == "__main__":
    asyncio.run(main())
