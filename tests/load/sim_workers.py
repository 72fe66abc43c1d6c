"""Simulated workers: N WebSocket connections to `/ws/worker`, each registered as a machine of
its own, heartbeating every `--interval` seconds (phases spread evenly) until standard input
closes. Prints `connected N` once all are registered. With `--beats K`, each sends K heartbeats
(the k-th reporting `cpu_percent` k) and the process prints `sent N*K` once all have been sent,
then keeps the connections open until standard input closes.

Used by `tests/load` (a reduced size) and `benchmarks/bench_load.py` (the full one):

    python tests/load/sim_workers.py --url http://127.0.0.1:8000 --token shw_… --count 1000
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import uuid

from websockets.asyncio.client import ClientConnection, connect

OPENING = 100  # connections being opened at once


def beat(cpu: float) -> str:
    """A heartbeat frame of a worker running nothing."""
    return json.dumps({"type": "heartbeat", "cpu_percent": cpu, "memory_percent": 10.0,
                       "disk_percent": 20.0, "running": []})


class Fleet:
    """The simulated workers' shared state."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.url = args.url.replace("http://", "ws://") + "/ws/worker"
        self.token, self.total = args.token, args.count
        self.interval, self.beats = args.interval, args.beats
        self.ready = asyncio.Semaphore(OPENING)
        self.registered, self.stop = asyncio.Event(), asyncio.Event()
        self.connected = self.finished = 0
        self.all_sent = asyncio.Event()

    async def one(self, index: int) -> None:
        async with self.ready:
            ws = await connect(self.url, open_timeout=120, max_size=2**24,
                               additional_headers={"Authorization": f"Bearer {self.token}"})
            await ws.send(json.dumps({
                "type": "worker_register", "machine_id": f"load-{uuid.uuid4().hex}",
                "machine_name": f"load-{index}", "tools": [{"name": "echo", "local": False}],
                "slots": 1, "features": ["acks", "batches"]}))
            while json.loads(await ws.recv()).get("type") != "registered":
                pass
        self.connected += 1
        if self.connected == self.total:
            self.registered.set()
        await self.registered.wait()
        reader = asyncio.create_task(_drain(ws))
        try:
            await self._beat(ws, self.interval * index / self.total)
            await self.stop.wait()
        finally:
            reader.cancel()
            await ws.close()

    async def _beat(self, ws: ClientConnection, phase: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stop.wait(), phase)
        sent = 0
        while not self.stop.is_set() and (self.beats is None or sent < self.beats):
            sent += 1
            await ws.send(beat(float(sent) if self.beats else 1.0))
            if sent == self.beats:
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop.wait(), self.interval)
        self.finished += 1
        if self.finished == self.total:
            self.all_sent.set()


async def _drain(ws: ClientConnection) -> None:
    async for _ in ws:
        pass


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--interval", type=float, default=10.0)
    parser.add_argument("--beats", type=int, default=None, help="heartbeats each, then stop")
    fleet = Fleet(parser.parse_args())
    tasks = [asyncio.create_task(fleet.one(i)) for i in range(fleet.total)]
    await fleet.registered.wait()
    print(f"connected {fleet.total}", flush=True)
    if fleet.beats:
        await fleet.all_sent.wait()
        print(f"sent {fleet.total * fleet.beats}", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    fleet.stop.set()
    await asyncio.gather(*tasks, return_exceptions=True)


if __name__ == "__main__":
    asyncio.run(main())
