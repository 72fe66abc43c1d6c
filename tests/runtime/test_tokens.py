"""Streamed model text: coalesced by the worker (`TokenStream`), published at most once per
interval per attempt by the control plane (`TokenRelay`), live only (`seq` 0)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable

from shoal.bus.memory import MemoryBus
from shoal.events import EventType
from shoal.runtime.tokens import TokenRelay
from shoal.worker.tokenstream import MAX_BUFFERED, TokenStream


async def test_the_worker_sends_what_piled_up_once_per_interval() -> None:
    gate, paused = asyncio.Event(), asyncio.Event()
    pauses: list[float] = []

    async def pause(seconds: float) -> None:  # the test decides when the interval is over
        pauses.append(seconds)
        paused.set()
        await gate.wait()
        gate.clear()

    stream = TokenStream(interval=0.05, pause=pause)
    started: list[bool] = []
    stream.start_with(lambda: started.append(True))
    assert not started  # nothing streamed yet: no forwarder
    stream.write("Hel")
    stream.write("lo")
    assert started == [True]
    chunks = stream.chunks()
    assert await anext(chunks) == "Hello"
    following = asyncio.ensure_future(anext(chunks))
    await paused.wait()  # the interval after the first chunk has begun
    stream.write(", ")
    stream.write("world")
    assert not following.done()  # held until the interval is over
    gate.set()
    assert await following == ", world"
    assert pauses == [0.05]
    stream.write("!")
    stream.close()
    gate.set()
    assert [c async for c in chunks] == ["!"]


def test_a_flood_keeps_the_newest_text_within_bounds() -> None:
    stream = TokenStream()
    stream.write("x" * MAX_BUFFERED)
    stream.write("tail")
    assert len(stream._text) == MAX_BUFFERED
    assert stream._text.endswith("tail")


async def test_the_control_plane_publishes_at_most_one_event_per_interval_per_attempt() -> None:
    bus = MemoryBus()
    now = [100.0]
    later: list[tuple[float, Callable[[], None]]] = []
    relay = TokenRelay(bus, interval=0.05, clock=lambda: now[0],
                       later=lambda delay, fn: later.append((delay, fn)))
    attempt, other = uuid.uuid4(), uuid.uuid4()
    ids = {"task_id": uuid.uuid4(), "subtask_id": uuid.uuid4(), "user_id": uuid.uuid4()}
    async with bus.subscribe() as sub:
        events = aiter(sub)
        relay.offer(attempt, "one ", **ids)
        first = await anext(events)
        assert (first.type, first.seq, first.live_only) == (EventType.AGENT_TOKEN, 0, True)
        assert first.data["text"] == "one "
        now[0] += 0.01
        relay.offer(attempt, "two ", **ids)
        relay.offer(attempt, "three", **ids)
        relay.offer(other, "elsewhere", **ids)  # another attempt has its own interval
        assert (await anext(events)).data["text"] == "elsewhere"
        assert [round(d, 3) for d, _ in later] == [0.04]  # one flush put off, not two
        now[0] += 0.04
        later.pop()[1]()
        assert (await anext(events)).data["text"] == "two three"
