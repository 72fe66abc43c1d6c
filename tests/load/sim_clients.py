"""Simulated watchers: N client WebSockets on `/ws`, each subscribed live to the user's task
events (or, with `--tasks`, to one of those tasks' events, the watchers spread evenly). Prints
`subscribed N` once all are; then, when standard input closes (or, with `--until-ended`, once
every watcher has seen a task end), one JSON line: for each event sequence number, how many
deliveries the watchers got and when the last one did (`time.time()`).

Used by `tests/load` (a reduced size) and `benchmarks/bench_load.py --clients` (the full one):

    python tests/load/sim_clients.py --url http://127.0.0.1:8000 --token ACCESS --count 1000
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

OPENING = 100  # connections being opened at once
TYPES = ["task_update", "subtask_update", "task_complete", "task_failed"]
ENDS = frozenset({"task_complete", "task_failed"})


class Watchers:
    """The simulated watchers' shared state."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.url = args.url.replace("http://", "ws://") + f"/ws?token={args.token}"
        self.total = args.count
        self.ready = asyncio.Semaphore(OPENING)
        self.subscribed, self.stop = asyncio.Event(), asyncio.Event()
        self.joined = self.ended = 0
        self.all_ended = asyncio.Event()
        self.got: dict[int, list[float]] = {}
        self.tasks: list[str] = [t for t in args.tasks.split(",") if t]
        self.started = 0

    def subscription(self) -> str:
        """The next watcher's subscribe message: every task's events, or one task's in turn."""
        message: dict[str, object] = {"type": "subscribe", "event_types": TYPES, "batch": True}
        if self.tasks:
            message["task_id"] = self.tasks[self.started % len(self.tasks)]
        self.started += 1
        return json.dumps(message)

    async def one(self) -> None:
        async with self.ready:
            ws = await connect(self.url, open_timeout=120, max_size=2**24, ping_interval=None)
            await ws.send(self.subscription())
            while json.loads(await ws.recv()).get("type") != "subscribed":
                pass
        self.joined += 1
        if self.joined == self.total:
            self.subscribed.set()
        reader = asyncio.create_task(self._read(ws))
        await self.stop.wait()
        reader.cancel()
        with contextlib.suppress(Exception):
            await ws.close()

    async def _read(self, ws: ClientConnection) -> None:
        ended = False
        with contextlib.suppress(ConnectionClosed):
            async for raw in ws:
                now = time.time()
                frame = json.loads(raw)
                for item in frame["items"] if frame.get("type") == "batch" else [frame]:
                    seq = item.get("seq")
                    if seq:
                        seen = self.got.setdefault(seq, [0, 0.0])
                        seen[0] += 1
                        seen[1] = max(seen[1], now)
                    if not ended and item.get("type") in ENDS:
                        ended = True
                        self.ended += 1
                        if self.ended == self.total:
                            self.all_ended.set()


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--tasks", default="",
                        help="task ids, comma-separated: each watcher follows one, in turn")
    parser.add_argument("--until-ended", action="store_true",
                        help="report once every watcher has seen a task end")
    args = parser.parse_args()
    watchers = Watchers(args)
    tasks = [asyncio.create_task(watchers.one()) for _ in range(watchers.total)]
    await watchers.subscribed.wait()
    print(f"subscribed {watchers.total}", flush=True)
    if args.until_ended:
        await watchers.all_ended.wait()
    else:
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    watchers.stop.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    print(json.dumps({str(k): v for k, v in watchers.got.items()}), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
