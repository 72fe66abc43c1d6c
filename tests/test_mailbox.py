"""The light bounded queue under every watcher's subscription and stream pump (`shoal.mailbox`)."""

from __future__ import annotations

import asyncio

import pytest

from shoal.mailbox import Mailbox


async def _turns(n: int = 20) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def test_items_come_out_in_order_and_a_full_mailbox_refuses_without_waiting() -> None:
    box: Mailbox[int] = Mailbox(3)
    assert box.empty()
    assert not box.full()
    assert [box.put_nowait(i) for i in range(4)] == [True, True, True, False]
    assert box.full()
    assert [await box.get(), box.get_nowait(), await box.get()] == [0, 1, 2]
    assert box.empty()
    with pytest.raises(IndexError):
        box.get_nowait()


async def test_get_waits_for_an_item_and_put_waits_for_room() -> None:
    box: Mailbox[str] = Mailbox(1)
    getter = asyncio.create_task(box.get())
    await _turns()
    assert not getter.done()
    await box.put("a")
    assert await asyncio.wait_for(getter, 5) == "a"

    box.put_nowait("b")
    putter = asyncio.create_task(box.put("c"))
    await _turns()
    assert not putter.done()  # no room until "b" is read
    assert box.get_nowait() == "b"
    await asyncio.wait_for(putter, 5)
    assert box.get_nowait() == "c"


async def test_a_cancelled_get_takes_nothing() -> None:
    box: Mailbox[int] = Mailbox(2)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(box.get(), 0.01)
    box.put_nowait(1)
    assert await asyncio.wait_for(box.get(), 5) == 1  # a new reader is woken, not the old one


async def test_clear_drops_the_items_and_lets_a_waiting_writer_in() -> None:
    box: Mailbox[int] = Mailbox(1)
    box.put_nowait(1)
    putter = asyncio.create_task(box.put(2))
    await _turns()
    box.clear()
    await asyncio.wait_for(putter, 5)
    assert box.get_nowait() == 2
    assert box.empty()


async def test_a_burst_goes_in_as_far_as_there_is_room_and_comes_out_in_order() -> None:
    box: Mailbox[int] = Mailbox(5)
    getter = asyncio.create_task(box.get())
    await _turns()
    assert box.put_all([1, 2, 3]) == 3  # the waiting reader is woken once, for all three
    assert await asyncio.wait_for(getter, 5) == 1
    assert box.put_all([]) == 0
    assert box.put_all((4, 5, 6, 7)) == 3  # room for three: the first three, in order
    assert box.full()
    assert box.put_all([8]) == 0
    assert box.take_nowait(2) == [2, 3]
    assert box.take_nowait(10) == [4, 5, 6]
    assert box.take_nowait(10) == []
    assert box.empty()


async def test_taking_a_burst_lets_a_waiting_writer_in() -> None:
    box: Mailbox[int] = Mailbox(2)
    box.put_all([1, 2])
    putter = asyncio.create_task(box.put(3))
    await _turns()
    assert not putter.done()
    assert box.take_nowait(1) == [1]
    await asyncio.wait_for(putter, 5)
    assert box.take_nowait(5) == [2, 3]


def test_a_mailbox_holds_at_least_one_item() -> None:
    with pytest.raises(ValueError, match="at least one"):
        Mailbox(0)
