"""Tests for an attempt's log stream: forwarding starts with the first line."""

from __future__ import annotations

from shoal.worker.logstream import LogStream


async def test_a_silent_attempt_starts_no_forwarder() -> None:
    """No line written before close: the starter is never called."""
    calls: list[int] = []
    stream = LogStream()
    stream.start_with(lambda: calls.append(1))
    stream.close()
    stream.write("too late")
    assert calls == []


async def test_the_first_line_starts_the_forwarder_once() -> None:
    """The first write calls the starter; later writes do not call it again."""
    calls: list[int] = []
    stream = LogStream()
    stream.start_with(lambda: calls.append(1))
    stream.write("one")
    stream.write("two")
    assert calls == [1]
    stream.close()
    assert [chunk async for chunk in stream.batches()] == ["one\ntwo"]


async def test_lines_written_before_start_with_start_it_at_once() -> None:
    """Lines already waiting (skipped upstream files) start the forwarder right away."""
    calls: list[int] = []
    stream = LogStream()
    stream.write("[shoal] upstream file x skipped")
    stream.start_with(lambda: calls.append(1))
    assert calls == [1]
