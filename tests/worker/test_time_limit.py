"""An attempt's time limit (`executor._call_tool`): the cancellation it causes, and only that
one, becomes a `timed_out` result, as `asyncio.timeout` would have it."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from shoal.protocol import ExecuteTask
from shoal.tools.base import ToolOutcome, ToolRun
from shoal.worker.executor import _call_tool, _tool_run
from shoal.worker.logstream import LogStream

Behaviour = Callable[[], Awaitable[ToolOutcome]]


class Tool:
    """A tool that does what the test gives it to do."""

    name = "t"
    local = True

    def __init__(self, behaviour: Behaviour) -> None:
        self.behaviour = behaviour

    async def run(self, run: ToolRun) -> ToolOutcome:
        return await self.behaviour()


def _run(tmp_path: Path, timeout: float) -> ToolRun:
    msg = ExecuteTask(attempt_id=uuid.uuid4(), fence=1, task_id=uuid.uuid4(),
                      subtask_id=uuid.uuid4(), role="coder", tool="t", name="step",
                      instructions="go", timeout=timeout)
    return _tool_run(msg, tmp_path, LogStream(), None)


async def _forever() -> ToolOutcome:
    await asyncio.Event().wait()
    raise AssertionError("never set")


async def _called(tool: Tool, run: ToolRun) -> tuple[str, ToolOutcome, int]:
    """`_call_tool` in a task of its own: its status, outcome, and the task's cancellations
    still pending once it returned."""
    async def call() -> tuple[str, ToolOutcome, int]:
        status, outcome = await _call_tool(tool, run)
        task = asyncio.current_task()
        assert task is not None
        return status, outcome, task.cancelling()

    return await asyncio.wait_for(asyncio.create_task(call()), 10)


async def test_a_tool_past_its_limit_is_stopped_and_timed_out(tmp_path: Path) -> None:
    status, outcome, pending = await _called(Tool(_forever), _run(tmp_path, 0.01))
    assert status == "timed_out"
    assert outcome.error == ("The attempt ran past its time limit of 0.01 seconds and was "
                             "stopped.")
    assert pending == 0  # the limit's own cancellation is taken back


async def test_a_tool_within_its_limit_keeps_its_outcome(tmp_path: Path) -> None:
    async def quick() -> ToolOutcome:
        return ToolOutcome(status="succeeded", output="done")

    status, outcome, pending = await _called(Tool(quick), _run(tmp_path, 30))
    assert (status, outcome.output, pending) == ("succeeded", "done", 0)


async def test_a_timeout_error_of_the_tools_own_is_a_failure(tmp_path: Path) -> None:
    async def gives_up() -> ToolOutcome:
        raise TimeoutError("the model server did not answer")

    status, outcome, _ = await _called(Tool(gives_up), _run(tmp_path, 30))
    assert (status, outcome.error) == ("failed", "TimeoutError: the model server did not answer")


async def test_a_tool_that_swallows_the_cancellation_keeps_its_outcome(tmp_path: Path) -> None:
    async def stubborn() -> ToolOutcome:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            return ToolOutcome(status="succeeded", output="finished anyway")
        raise AssertionError("never set")

    status, outcome, pending = await _called(Tool(stubborn), _run(tmp_path, 0.01))
    assert (status, outcome.output, pending) == ("succeeded", "finished anyway", 0)


async def test_a_tool_that_turns_the_cancellation_into_an_error_fails(tmp_path: Path) -> None:
    async def converts() -> ToolOutcome:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            raise RuntimeError("interrupted") from None
        raise AssertionError("never set")

    status, outcome, pending = await _called(Tool(converts), _run(tmp_path, 0.01))
    assert (status, outcome.error, pending) == ("failed", "RuntimeError: interrupted", 0)


async def test_another_cancellation_beside_the_limit_wins(tmp_path: Path) -> None:
    async def cancelled_twice() -> ToolOutcome:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:  # the limit's; then someone else's as well
            task = asyncio.current_task()
            assert task is not None
            task.cancel()
            raise
        raise AssertionError("never set")

    with pytest.raises(asyncio.CancelledError):
        await _called(Tool(cancelled_twice), _run(tmp_path, 0.01))


async def test_a_cancellation_before_the_limit_is_not_a_timeout(tmp_path: Path) -> None:
    started = asyncio.Event()

    async def waits() -> ToolOutcome:
        started.set()
        return await _forever()

    task = asyncio.create_task(_call_tool(Tool(waits), _run(tmp_path, 30)))
    await asyncio.wait_for(started.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
