"""Tests for running one attempt: the workspaces made ahead of need (ADR 0017)."""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path

import pytest
from pydantic import BaseModel

from shoal.config import Settings
from shoal.process import run_command
from shoal.protocol import ExecuteTask, FilePayload, UpstreamResult
from shoal.tools.base import ToolOutcome, ToolRun
from shoal.worker import executor as executor_module
from shoal.worker.executor import Attempt, Executor
from shoal.worker.workspace import READY_DIR


class RecordingTool:
    """Notes the workspace of each run and writes the files its options name."""

    name = "rec"
    local = True

    def __init__(self) -> None:
        self.workspaces: list[Path] = []
        self.arrived: asyncio.Queue[Path] = asyncio.Queue()  # each run's workspace, as it starts
        self.hold: asyncio.Event | None = None  # when set by a test, runs wait for it
        self.command: list[str] | None = None  # when set by a test, run in the workspace

    async def run(self, run: ToolRun) -> ToolOutcome:
        """Record the workspace, maybe wait, write `options["write"]`, succeed."""
        self.workspaces.append(run.workspace)
        self.arrived.put_nowait(run.workspace)
        if self.hold is not None:
            await self.hold.wait()
        if self.command is not None:
            await run_command(self.command, cwd=run.workspace, timeout=30)
        for name in run.options.get("write", []):
            (run.workspace / name).write_text("made")
        return ToolOutcome(status="succeeded", output="ok")


async def _nothing(message: BaseModel) -> bool:
    return True


def _message(task_id: uuid.UUID | None = None, *, write: tuple[str, ...] = (),
             upstream: list[UpstreamResult] | None = None) -> ExecuteTask:
    return ExecuteTask(
        attempt_id=uuid.uuid4(), fence=1, task_id=task_id or uuid.uuid4(),
        subtask_id=uuid.uuid4(), role="coder", tool="rec", name="step", instructions="go",
        timeout=30, options={"write": list(write)}, upstream=upstream or [])


async def _executor(tmp_path: Path, tool: RecordingTool, ready: int = 4) -> Executor:
    executor = Executor(Settings(mode="dev", data_dir=tmp_path), {"rec": tool},
                        tmp_path / "workspaces", _nothing, ready=ready)
    await executor.open()
    return executor


def _ready_folders(root: Path) -> list[str]:
    return sorted(p.name for p in (root / READY_DIR).iterdir())


async def test_a_folder_left_empty_without_processes_is_ready_again(tmp_path: Path) -> None:
    """A bare attempt runs in a folder made ahead of need; left empty, and with no process
    started that could still write into it, the folder serves the next attempt."""
    tool = RecordingTool()
    executor = await _executor(tmp_path, tool)
    first = await executor.outcome(Attempt(_message()))
    second = await executor.outcome(Attempt(_message()))
    assert (first.status, second.status) == ("succeeded", "succeeded")
    assert tool.workspaces[0] == tool.workspaces[1]
    assert tool.workspaces[0].parent == (tmp_path / "workspaces" / READY_DIR).resolve()


async def test_a_folder_an_attempt_started_a_process_in_is_used_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a process ran in it, a folder is never handed out again, even left empty; used
    folders are removed together once enough have gathered (not a thread job per attempt)."""
    monkeypatch.setattr(executor_module, "PUT_AWAY_EVERY", 2)
    tool = RecordingTool()
    tool.command = ["true"]
    executor = await _executor(tmp_path, tool)
    await executor.outcome(Attempt(_message()))
    await executor.finished(set())
    assert await asyncio.to_thread(tool.workspaces[0].exists)
    await executor.outcome(Attempt(_message()))
    assert tool.workspaces[0] != tool.workspaces[1]
    await executor.finished(set())
    assert not await asyncio.to_thread(tool.workspaces[0].exists)
    assert not await asyncio.to_thread(tool.workspaces[1].exists)
    assert len(await asyncio.to_thread(_ready_folders, tmp_path / "workspaces")) == 2


async def test_a_ready_folder_with_files_moves_to_its_attempt(tmp_path: Path) -> None:
    """Files come back in the result; the folder then moves to the attempt's own place and a
    fresh one takes its spot in the pool."""
    tool = RecordingTool()
    executor = await _executor(tmp_path, tool, ready=1)
    msg = _message(write=("out.txt",))
    result = await executor.outcome(Attempt(msg))
    assert [f.path for f in result.files] == ["out.txt"]
    await executor.finished(set())
    kept = tmp_path / "workspaces" / str(msg.task_id) / str(msg.attempt_id) / "out.txt"
    assert await asyncio.to_thread(kept.read_text) == "made"
    await executor.outcome(Attempt(_message()))
    assert tool.workspaces[1] != tool.workspaces[0]
    assert tool.workspaces[1].parent.name == READY_DIR
    assert not await asyncio.to_thread(tool.workspaces[0].exists)


async def test_attempts_beyond_the_pool_make_their_own_folders(tmp_path: Path) -> None:
    """With every ready folder in use, an attempt makes its folder where it always did."""
    tool = RecordingTool()
    tool.hold = asyncio.Event()
    executor = await _executor(tmp_path, tool, ready=1)
    first, second = _message(), _message()
    runs = [asyncio.create_task(executor.outcome(Attempt(m))) for m in (first, second)]
    for _ in runs:  # both are inside the tool at once
        await asyncio.wait_for(tool.arrived.get(), 10)
    tool.hold.set()
    assert [r.status for r in await asyncio.gather(*runs)] == ["succeeded", "succeeded"]
    own = (tmp_path / "workspaces" / str(second.task_id) / str(second.attempt_id)).resolve()
    assert tool.workspaces[0].parent.name == READY_DIR
    assert tool.workspaces[1] == own


async def test_an_attempt_with_upstream_files_gets_its_own_folder(tmp_path: Path) -> None:
    """Upstream files are written into a fresh folder of the attempt, not a ready one."""
    tool = RecordingTool()
    executor = await _executor(tmp_path, tool)
    upstream = UpstreamResult(subtask_id=uuid.uuid4(), name="before", output="",
                              files=[FilePayload(path="in.txt", content_b64="aGk=")])
    msg = _message(upstream=[upstream])
    await executor.outcome(Attempt(msg))
    assert tool.workspaces == [
        (tmp_path / "workspaces" / str(msg.task_id) / str(msg.attempt_id)).resolve()]


async def test_the_pool_is_refilled_when_it_runs_low(tmp_path: Path) -> None:
    """Folders that moved away are replaced once fewer than half are left."""
    tool = RecordingTool()
    executor = await _executor(tmp_path, tool, ready=2)
    for _ in range(2):
        await executor.outcome(Attempt(_message(write=("x.txt",))))
    await executor.finished(set())
    assert len(await asyncio.to_thread(_ready_folders, tmp_path / "workspaces")) == 2
    await executor.outcome(Attempt(_message()))
    assert tool.workspaces[2].parent.name == READY_DIR


async def test_leftovers_of_an_earlier_run_are_cleared_at_open(tmp_path: Path) -> None:
    """A folder a crashed worker left in the pool, files and all, is gone after a restart."""
    stale = tmp_path / "workspaces" / READY_DIR / "left-over"
    await asyncio.to_thread(stale.mkdir, parents=True)
    await asyncio.to_thread((stale / "half.txt").write_text, "x")
    await _executor(tmp_path, RecordingTool(), ready=3)
    folders = await asyncio.to_thread(_ready_folders, tmp_path / "workspaces")
    assert len(folders) == 3
    assert "left-over" not in folders


async def test_the_pool_never_keeps_more_than_its_size(tmp_path: Path) -> None:
    """Folders that come back while new ones were being made do not grow the pool."""
    tool = RecordingTool()
    tool.hold = asyncio.Event()
    executor = await _executor(tmp_path, tool, ready=2)
    runs = [asyncio.create_task(executor.outcome(Attempt(_message()))) for _ in range(2)]
    for _ in runs:
        await asyncio.wait_for(tool.arrived.get(), 10)
    await executor.finished(set())  # both out: the pool is refilled with two new folders
    tool.hold.set()
    await asyncio.gather(*runs)  # and both come back, left empty
    await executor.finished(set())
    assert len(executor._ready) == 2


async def test_pruning_keeps_the_folders_of_the_tasks_still_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every PRUNE_EVERY attempts the oldest task folders past KEEP_WORKSPACES go, but never
    the folder of a task an attempt still running belongs to, however old."""
    monkeypatch.setattr(executor_module, "PRUNE_EVERY", 1)
    monkeypatch.setattr(executor_module, "PRUNE_SECONDS", 0.0)
    tool = RecordingTool()
    executor = await _executor(tmp_path, tool)
    busy, done, newest = (_message(write=("out.txt",)) for _ in range(3))
    for msg in (busy, done, newest):  # each leaves a file: its folder moves to its task's place
        await executor.outcome(Attempt(msg))
        await executor.finished([])
    root = tmp_path / "workspaces"
    folders = [root / str(m.task_id) for m in (busy, done, newest)]
    old = 1_000_000_000.0
    for age, folder in enumerate(folders):  # busy oldest, newest newest
        await asyncio.to_thread(os.utime, folder, (old + age, old + age))
    monkeypatch.setattr(executor_module, "KEEP_WORKSPACES", 1)
    await executor.finished([Attempt(_message(busy.task_id))])
    kept = [await asyncio.to_thread(folder.exists) for folder in folders]
    assert kept == [True, False, True]


async def test_a_burst_of_attempts_prunes_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attempts that end close together prune every PRUNE_EVERY attempts only once
    PRUNE_SECONDS have passed since the last prune: a burst does not run a prune in a thread
    beside every tenth attempt."""
    monkeypatch.setattr(executor_module, "PRUNE_EVERY", 2)
    monkeypatch.setattr(executor_module, "PRUNE_SECONDS", 3600.0)
    pruned: list[set[str]] = []
    monkeypatch.setattr(executor_module, "prune_workspaces",
                        lambda root, *, keep, protect: pruned.append(set(protect)) or [])
    executor = await _executor(tmp_path, RecordingTool())
    running = Attempt(_message())
    for _ in range(10):
        await executor.outcome(Attempt(_message()))
        await executor.finished([running])
    assert pruned == [{str(running.message.task_id)}]  # the second attempt's, then none
    monkeypatch.setattr(executor_module, "PRUNE_SECONDS", 0.0)
    executor._next_prune = 0.0  # as if the hour had passed
    for _ in range(2):
        await executor.finished([])
    assert len(pruned) == 2
