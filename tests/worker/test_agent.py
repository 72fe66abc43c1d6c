"""Tests for the worker against a tiny fake control plane speaking the worker protocol."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path

import pytest

from shoal.config import Settings
from shoal.errors import InvalidInput, Unauthorized
from shoal.protocol import (
    Ack,
    AgentLog,
    CancelTask,
    Heartbeat,
    TaskAccepted,
    TaskResult,
    WorkerRegister,
)
from shoal.tools.registry import discover_tools
from shoal.worker.agent import Worker, run_worker
from shoal.worker.connection import Backoff, websocket_url
from shoal.worker.logstream import LogStream
from shoal.worker.system import load_machine_id
from tests.worker.fake_plane import (
    DEADLINE,
    BrokenTool,
    FakeControlPlane,
    GateTool,
    execute,
    make_worker,
    on_disk,
    outbox_of,
    running,
)


async def test_attempt_runs_end_to_end(plane: FakeControlPlane, gate: GateTool,
                                       tmp_path: Path) -> None:
    """Register, accept, log, deliver the result with its file, and forget it on ack."""
    worker = make_worker(plane, tmp_path, gate)
    async with running(worker):
        register = await plane.expect(WorkerRegister)
        assert register.machine_name == "test-worker"
        assert [t.name for t in register.tools] == ["gate"]
        msg = execute()
        await plane.send(msg)
        assert (await plane.expect(AgentLog)).message == "starting"
        # Still running ACCEPT_AFTER seconds later, so the worker says it accepted it.
        assert (await plane.expect(TaskAccepted)).attempt_id == msg.attempt_id
        gate.gate.set()
        result = await plane.expect(TaskResult)
        assert (result.status, result.fence, result.output) == ("succeeded", 7, "done")
        assert [(f.path, base64.b64decode(f.content_b64)) for f in result.files] == [
            ("out.txt", b"hello")
        ]
        # No ack within SAVE_AFTER: the result is written to the outbox.
        await asyncio.wait_for(outbox_of(worker).saved.wait(), DEADLINE)
        assert [r.attempt_id for r in on_disk(worker)] == [msg.attempt_id]
        await plane.send(Ack(attempt_id=msg.attempt_id, accepted=True))
        await asyncio.wait_for(outbox_of(worker).removed.wait(), DEADLINE)
        assert on_disk(worker) == []


async def test_cancel_task_reports_cancelled(plane: FakeControlPlane, gate: GateTool,
                                             tmp_path: Path) -> None:
    """cancel_task stops the tool and yields a cancelled result."""
    async with running(make_worker(plane, tmp_path, gate)):
        await plane.expect(WorkerRegister)
        msg = execute()
        await plane.send(msg)
        await plane.expect(TaskAccepted)
        await asyncio.wait_for(gate.started.wait(), DEADLINE)
        await plane.send(CancelTask(attempt_id=msg.attempt_id, reason="task cancelled"))
        result = await plane.expect(TaskResult)
        assert result.status == "cancelled"
        assert result.error == "Cancelled: task cancelled"
        assert gate.cancelled.is_set()


async def test_reconnect_reports_running_attempt(plane: FakeControlPlane, gate: GateTool,
                                                 tmp_path: Path) -> None:
    """After the connection drops mid-attempt, the worker re-registers naming the attempt."""
    async with running(make_worker(plane, tmp_path, gate)):
        await plane.expect(WorkerRegister)
        msg = execute()
        await plane.send(msg)
        await plane.expect(TaskAccepted)
        await asyncio.wait_for(gate.started.wait(), DEADLINE)
        assert plane.connection is not None
        await plane.connection.close()
        register = await plane.expect(WorkerRegister)
        assert register.running == [msg.attempt_id]
        gate.gate.set()
        result = await plane.expect(TaskResult)
        assert (result.attempt_id, result.status) == (msg.attempt_id, "succeeded")


async def test_result_made_offline_is_resent(plane: FakeControlPlane, gate: GateTool,
                                             tmp_path: Path) -> None:
    """A result finished while disconnected waits in the outbox and is sent after reconnect."""
    worker = make_worker(plane, tmp_path, gate)
    async with running(worker):
        await plane.expect(WorkerRegister)
        msg = execute()
        await plane.send(msg)
        await plane.expect(TaskAccepted)
        await asyncio.wait_for(gate.started.wait(), DEADLINE)
        plane.refusing = True
        assert plane.connection is not None
        await plane.connection.close()
        gate.gate.set()
        await asyncio.wait_for(outbox_of(worker).saved.wait(), DEADLINE)
        for _ in range(10):  # let `_save` finish: the result is then held on disk only
            await asyncio.sleep(0)
        assert worker.delivery.unacked == {msg.attempt_id: None}  # re-sent below from the file
        plane.refusing = False
        register = await plane.expect(WorkerRegister)
        assert register.running == []
        result = await plane.expect(TaskResult)
        assert (result.attempt_id, result.status) == (msg.attempt_id, "succeeded")


async def test_echo_tool_files_reach_control_plane(plane: FakeControlPlane,
                                                   tmp_path: Path) -> None:
    """With the discovered tools, the real echo tool's file comes back in the result."""
    settings = Settings(mode="dev", data_dir=tmp_path)
    worker = Worker(plane.url, plane.token, settings, tools=await discover_tools(settings),
                    name="test-worker")
    async with running(worker):
        register = await plane.expect(WorkerRegister)
        assert [t.name for t in register.tools] == ["citations", "echo", "evaluator"]
        msg = execute("echo").model_copy(update={"options": {"files": {"a/b.txt": "hi"}}})
        await plane.send(msg)
        result = await plane.expect(TaskResult)
        assert (result.status, result.output) == ("succeeded", "write out.txt")
        assert [(f.path, base64.b64decode(f.content_b64)) for f in result.files] == [
            ("a/b.txt", b"hi")
        ]


async def test_run_worker_stops_on_refused_token(plane: FakeControlPlane,
                                                 tmp_path: Path) -> None:
    """run_worker surfaces a refused token as Unauthorized."""
    settings = Settings(mode="dev", data_dir=tmp_path)
    with pytest.raises(Unauthorized):
        await asyncio.wait_for(run_worker(settings, plane.url, "wrong", name="w1"), DEADLINE)


async def test_refused_token_is_fatal(plane: FakeControlPlane, tmp_path: Path) -> None:
    """An HTTP 401 on connect stops the worker with an error that says what to do."""
    worker = make_worker(plane, tmp_path)
    plane.token = "another-token"
    with pytest.raises(Unauthorized, match="shoal token create --worker test-worker"):
        await asyncio.wait_for(worker.run(), DEADLINE)


async def test_unknown_tool_fails_naming_available_tools(
    plane: FakeControlPlane, gate: GateTool, tmp_path: Path
) -> None:
    """An attempt for a tool this worker lacks fails with the list of tools it has."""
    async with running(make_worker(plane, tmp_path, gate)):
        await plane.expect(WorkerRegister)
        await plane.send(execute("claude_code"))
        result = await plane.expect(TaskResult)
        assert result.status == "failed"
        assert result.error == "This worker has no tool 'claude_code'; it has: gate."


async def test_tool_exception_fails_attempt_not_worker(
    plane: FakeControlPlane, gate: GateTool, tmp_path: Path
) -> None:
    """A tool that raises gives a failed result; the worker keeps serving."""
    async with running(make_worker(plane, tmp_path, gate, BrokenTool())):
        await plane.expect(WorkerRegister)
        await plane.send(execute("broken"))
        result = await plane.expect(TaskResult)
        assert (result.status, result.error) == ("failed", "RuntimeError: model server unreachable")
        gate.gate.set()
        await plane.send(execute())
        assert (await plane.expect(TaskResult)).status == "succeeded"


async def test_time_limit_yields_timed_out(plane: FakeControlPlane, gate: GateTool,
                                           tmp_path: Path) -> None:
    """An attempt that outlives its timeout is stopped and reported timed_out."""
    async with running(make_worker(plane, tmp_path, gate)):
        await plane.expect(WorkerRegister)
        await plane.send(execute(timeout=0.05))
        result = await plane.expect(TaskResult)
        assert result.status == "timed_out"
        assert gate.cancelled.is_set()


async def test_duplicate_execute_is_ignored(plane: FakeControlPlane, gate: GateTool,
                                            tmp_path: Path) -> None:
    """A second execute_task for a running attempt starts nothing."""
    worker = make_worker(plane, tmp_path, gate)
    async with running(worker):
        await plane.expect(WorkerRegister)
        msg, marker = execute(), execute("none")
        await plane.send(msg)
        await plane.send(msg)
        await plane.send(marker)  # messages are handled in order: the marker comes next
        # The marker's tool does not exist: its failed result comes at once, with no
        # `task_accepted` before it, and only after the duplicate was handled.
        result = await plane.expect(TaskResult)
        assert (result.attempt_id, result.status) == (marker.attempt_id, "failed")
        assert worker.running == [msg.attempt_id]
        assert (await plane.expect(TaskAccepted)).attempt_id == msg.attempt_id


@pytest.mark.parametrize(("features", "status"), [([], "failed"), (["declines"], "declined")])
async def test_no_free_slot_declines_attempt(plane: FakeControlPlane, gate: GateTool,
                                             tmp_path: Path, features: list[str],
                                             status: str) -> None:
    """An attempt beyond the worker's slots is declined (it never ran; the control plane
    spends no try on it), or failed for a control plane that does not know declines."""
    plane.features = features
    async with running(make_worker(plane, tmp_path, gate, slots=1)):
        await plane.expect(WorkerRegister)
        await plane.send(execute())
        await plane.expect(TaskAccepted)
        extra = execute()
        await plane.send(extra)
        result = await plane.expect(TaskResult)
        assert (result.attempt_id, result.status, result.error) == (
            extra.attempt_id, status, "worker has no free slot")


async def test_heartbeat_names_running_attempts(plane: FakeControlPlane, gate: GateTool,
                                                tmp_path: Path) -> None:
    """Heartbeats arrive at the registered interval and list the running attempts."""
    plane.heartbeat_interval = 0.02
    async with running(make_worker(plane, tmp_path, gate)):
        await plane.expect(WorkerRegister)
        msg = execute()
        await plane.send(msg)
        await asyncio.wait_for(gate.started.wait(), DEADLINE)
        while (beat := await plane.expect(Heartbeat)).running != [msg.attempt_id]:
            pass
        assert 0 <= beat.memory_percent <= 100


async def test_stop_cancels_running_attempt(plane: FakeControlPlane, gate: GateTool,
                                            tmp_path: Path) -> None:
    """stop() with no grace cancels running attempts and reports them cancelled."""
    worker = make_worker(plane, tmp_path, gate)
    async with asyncio.TaskGroup() as group:
        runner = group.create_task(worker.run())
        await plane.expect(WorkerRegister)
        await plane.send(execute())
        await asyncio.wait_for(gate.started.wait(), DEADLINE)
        worker.stop(grace=0)
        result = await plane.expect(TaskResult)
        assert result.status == "cancelled"
        assert "shut down" in (result.error or "")
        await asyncio.wait_for(runner, DEADLINE)


async def test_log_stream_coalesces_and_counts_drops() -> None:
    """Lines that pile up go out as one message, and overflow is reported, not kept."""
    stream = LogStream(limit=2)
    for line in ("a", "b", "c", "d"):
        stream.write(line)
    stream.close()
    chunks = [chunk async for chunk in stream.batches()]
    assert len(chunks) == 1
    assert chunks[0].splitlines()[1:] == ["a", "b"]
    assert "2 log lines dropped" in chunks[0]


def test_backoff_is_jittered_and_capped() -> None:
    """Delays stay within [0, min(cap, base * 2**n)] and start over after reset()."""
    backoff = Backoff(base=0.5, cap=4.0)
    for ceiling in (0.5, 1.0, 2.0, 4.0, 4.0, 4.0):
        assert 0 <= backoff.next_delay() <= ceiling
    backoff.reset()
    assert backoff.next_delay() <= 0.5


@pytest.mark.parametrize(
    ("server", "expected"),
    [
        ("http://cp:8000", "ws://cp:8000/ws/worker"),
        ("https://cp.example/shoal/", "wss://cp.example/shoal/ws/worker"),
        ("ws://cp:8000/ws/worker", "ws://cp:8000/ws/worker"),
    ],
)
def test_websocket_url(server: str, expected: str) -> None:
    """The worker endpoint is derived from the control plane's address."""
    assert websocket_url(server) == expected


def test_websocket_url_refuses_other_schemes() -> None:
    """A server address that is not http(s) or ws(s) is refused with an example."""
    with pytest.raises(InvalidInput, match="--server http://"):
        websocket_url("cp:8000")


def test_machine_id_is_stable(tmp_path: Path) -> None:
    """The machine id is created once and read back afterwards."""
    first = load_machine_id(tmp_path / "worker" / "machine_id")
    assert load_machine_id(tmp_path / "worker" / "machine_id") == first
