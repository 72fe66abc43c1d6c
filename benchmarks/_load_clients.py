"""Simulated watchers for `bench_load.py --clients`: N client WebSockets on `/ws`, each
subscribed live to the user's task events. Prints `subscribed N` once all are; when standard
input closes, prints one JSON line: for each event sequence number, how many clients got it and
when the last one did (`time.time()`).

    python benchmarks/_load_clients.py --url http://127.0.0.1:8000 --token ACCESS --count 1000
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time

from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

OPENING = 100  # connections being opened at once
TYPES = ["task_update", "subtask_update", "task_complete"]


async def one(url: str, ready: asyncio.Semaphore, done: list[int], total: int,
              all_in: asyncio.Event, got: dict[int, list[float]], stop: asyncio.Event) -> None:
    async with ready:
        ws = await connect(url, open_timeout=120, max_size=2**24, ping_interval=None)
        await ws.send(json.dumps({"type": "subscribe", "event_types": TYPES, "batch": True}))
        while json.loads(await ws.recv()).get("type") != "subscribed":
            pass
    done[0] += 1
    if done[0] == total:
        all_in.set()
    reader = asyncio.create_task(_read(ws, got))
    await stop.wait()
    reader.cancel()
    with contextlib.suppress(Exception):
        await ws.close()


async def _read(ws: object, got: dict[int, list[float]]) -> None:
    with contextlib.suppress(ConnectionClosed):
        async for raw in ws:  # type: ignore[attr-defined]
            now = time.time()
            frame = json.loads(raw)
            for item in frame["items"] if frame.get("type") == "batch" else [frame]:
                seq = item.get("seq")
                if seq:
                    seen = got.setdefault(seq, [0, 0.0])
                    seen[0] += 1
                    seen[1] = max(seen[1], now)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--count", type=int, default=1000)
    args = parser.parse_args()
    url = args.url.replace("http://", "ws://") + f"/ws?token={args.token}"
    stop, all_in = asyncio.Event(), asyncio.Event()
    ready, done = asyncio.Semaphore(OPENING), [0]
    got: dict[int, list[float]] = {}
    tasks = [asyncio.create_task(one(url, ready, done, args.count, all_in, got, stop))
             for _ in range(args.count)]
    await all_in.wait()
    print(f"subscribed {args.count}", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    stop.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    print(json.dumps({str(k): v for k, v in got.items()}), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
