"""Tests for the worker against a tiny fake control plane speaking the worker protocol."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import uuid
from collections.abc import AsyncIterator
from http import HTTPStatus
from pathlib import Path
from typing import TypeVar

import pytest
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from shoal.config import Settings
from shoal.errors import InvalidInput, Unauthorized
from shoal.protocol import (
    Ack,
    Acks,
    AgentLog,
    CancelTask,
    ExecuteTask,
    ExecuteTasks,
    Heartbeat,
    Registered,
    TaskAccepted,
    TaskResult,
    TaskResults,
    Usage,
    WorkerMessage,
    WorkerRegister,
    parse_worker_message,
)
from shoal.tools.base import Tool, ToolOutcome, ToolRun
from shoal.tools.registry import discover_tools
from shoal.worker import agent as agent_module
from shoal.worker.agent import Worker, run_worker
from shoal.worker.connection import Backoff, websocket_url
from shoal.worker.logstream import LogStream
from shoal.worker.outbox import Outbox, read_pending
from shoal.worker.system import load_machine_id

M = TypeVar("M", bound=WorkerMessage)
DEADLINE = 10.0
_CHATTER = (Heartbeat, AgentLog, TaskAccepted)  # skipped by `expect` unless asked for


class GateTool:
    """A tool that logs, writes a file, then waits until the test opens its gate."""

    name = "gate"
    local = True

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.started = asyncio.Event()
        self.cancelled = asyncio.Event()

    async def run(self, run: ToolRun) -> ToolOutcome:
        """Log a line, write out.txt, and wait for the gate."""
        run.log("starting")
        (run.workspace / "out.txt").write_bytes(b"hello")
        self.started.set()
        try:
            await self.gate.wait()
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        return ToolOutcome(status="succeeded", output="done", usage=Usage(input_tokens=3))


class TogetherTool:
    """A tool whose runs all wait for one gate and write nothing, so that they end in the
    same turn of the event loop once it opens."""

    name = "together"
    local = True

    def __init__(self, expected: int, padding: int = 0) -> None:
        self.gate = asyncio.Event()
        self.all_started = asyncio.Event()
        self._expected = expected
        self._started = 0
        self._padding = padding

    async def run(self, run: ToolRun) -> ToolOutcome:
        """Wait for the gate."""
        self._started += 1
        if self._started >= self._expected:
            self.all_started.set()
        await self.gate.wait()
        return ToolOutcome(status="succeeded", output=run.name + "." * self._padding)


class BrokenTool:
    """A tool that raises."""

    name = "broken"
    local = True

    async def run(self, run: ToolRun) -> ToolOutcome:
        """Fail loudly."""
        raise RuntimeError("model server unreachable")


class FakeControlPlane:
    """Just enough of `/ws/worker` for a test to drive a real worker."""

    def __init__(self) -> None:
        self.token = "secret-token"
        self.refusing = False
        self.heartbeat_interval = 60.0
        self.url = ""
        self.messages: asyncio.Queue[WorkerMessage] = asyncio.Queue()
        self.connection: ServerConnection | None = None
        self.features: list[str] = []  # protocol additions this control plane claims

    def check(self, connection: ServerConnection, request: Request) -> Response | None:
        """Refuse the upgrade while `refusing`, and without the right bearer token."""
        if self.refusing:
            return connection.respond(HTTPStatus.SERVICE_UNAVAILABLE, "busy\n")
        if request.headers.get("Authorization") != f"Bearer {self.token}":
            return connection.respond(HTTPStatus.UNAUTHORIZED, "bad token\n")
        return None

    async def handle(self, connection: ServerConnection) -> None:
        """Answer registrations and queue everything the worker says."""
        self.connection = connection
        with contextlib.suppress(ConnectionClosed):
            async for raw in connection:
                message = parse_worker_message(raw)
                if isinstance(message, WorkerRegister):
                    registered = Registered(worker_id=uuid.uuid4(), lease_seconds=90.0,
                                            heartbeat_interval=self.heartbeat_interval,
                                            features=self.features)
                    await connection.send(registered.model_dump_json())
                await self.messages.put(message)

    async def expect(self, kind: type[M]) -> M:
        """The next message, which must be a `kind`; chatter of other kinds is skipped."""
        async with asyncio.timeout(DEADLINE):
            while True:
                message = await self.messages.get()
                if isinstance(message, _CHATTER) and not isinstance(message, kind):
                    continue
                assert isinstance(message, kind), message
                return message

    async def send(self, message: ExecuteTask | ExecuteTasks | CancelTask | Ack | Acks) -> None:
        """Send a message on the current connection."""
        assert self.connection is not None
        await self.connection.send(message.model_dump_json())


@pytest.fixture
async def plane() -> AsyncIterator[FakeControlPlane]:
    """A fake control plane listening on a free local port."""
    fake = FakeControlPlane()
    async with serve(fake.handle, "127.0.0.1", 0, process_request=fake.check) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        fake.url = f"http://127.0.0.1:{port}"
        yield fake


@pytest.fixture
def gate() -> GateTool:
    """A fresh gate tool."""
    return GateTool()


def make_worker(plane: FakeControlPlane, data_dir: Path, *tools: Tool, slots: int = 2) -> Worker:
    """A worker with fast reconnects, pointed at `plane`."""
    settings = Settings(mode="dev", data_dir=data_dir)
    worker = Worker(plane.url, plane.token, settings, tools={t.name: t for t in tools},
                    name="test-worker", slots=slots, backoff=Backoff(base=0.01, cap=0.05))
    worker.outbox = SignallingOutbox(worker.outbox.directory)
    return worker


def outbox_of(worker: Worker) -> SignallingOutbox:
    """The test outbox `make_worker` installed."""
    assert isinstance(worker.outbox, SignallingOutbox)
    return worker.outbox


def on_disk(worker: Worker) -> list[TaskResult]:
    """The results a restarted `worker` would find in its outbox."""
    return read_pending(worker.outbox.directory)


def _noting_acks(worker: Worker, count: int = 1) -> asyncio.Event:
    """An event set once the worker has handled `count` acks."""
    handled = asyncio.Event()
    forget = worker._forget
    seen: list[Ack] = []

    async def noted(ack: Ack) -> None:
        await forget(ack)
        seen.append(ack)
        if len(seen) >= count:
            handled.set()

    worker._forget = noted  # type: ignore[method-assign]
    return handled


@contextlib.asynccontextmanager
async def running(worker: Worker) -> AsyncIterator[None]:
    """Run `worker` for the duration of the block, then stop it without grace."""
    async with asyncio.TaskGroup() as group:
        group.create_task(worker.run())
        try:
            yield
        finally:
            worker.stop(grace=0)


class SignallingOutbox(Outbox):
    """An outbox that tells the test when a result was saved or removed."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self.saved = asyncio.Event()
        self.removed = asyncio.Event()
        self.removed_ids: list[uuid.UUID] = []
        self.removed_all: tuple[int, asyncio.Event] | None = None  # (count, set on reaching it)
        self.hold: asyncio.Event | None = None  # when set by a test, saves wait for it

    async def save(self, result: TaskResult, encoded: str | None = None) -> None:
        """Save (once `hold` allows), then signal."""
        if self.hold is not None:
            await self.hold.wait()
        await super().save(result, encoded)
        self.saved.set()

    async def remove(self, attempt_id: uuid.UUID) -> None:
        """Remove, then signal."""
        await super().remove(attempt_id)
        self.removed_ids.append(attempt_id)
        self.removed.set()
        if self.removed_all is not None and len(self.removed_ids) >= self.removed_all[0]:
            self.removed_all[1].set()


def execute(tool: str = "gate", *, timeout: float = 60.0) -> ExecuteTask:
    """An execute_task for a fresh attempt."""
    return ExecuteTask(
        attempt_id=uuid.uuid4(), fence=7, task_id=uuid.uuid4(), subtask_id=uuid.uuid4(),
        role="coder", tool=tool, name="step", instructions="write out.txt", timeout=timeout,
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


async def test_one_acks_message_forgets_every_result_it_names(
    plane: FakeControlPlane, gate: GateTool, tmp_path: Path
) -> None:
    """The worker says it understands `acks`; one such message forgets each result it names
    (whether or not its outbox write had begun)."""
    worker = make_worker(plane, tmp_path, gate)
    acked = _noting_acks(worker, count=2)
    async with running(worker):
        assert "acks" in (await plane.expect(WorkerRegister)).features
        first, second = execute(), execute()
        await plane.send(first)
        await plane.send(second)
        gate.gate.set()
        results = {(await plane.expect(TaskResult)).attempt_id for _ in range(2)}
        assert results == {first.attempt_id, second.attempt_id}
        await plane.send(Acks(acks=[Ack(attempt_id=first.attempt_id, accepted=True),
                                    Ack(attempt_id=second.attempt_id, accepted=False,
                                        reason="refused")]))
        await asyncio.wait_for(acked.wait(), DEADLINE)
        assert worker._unacked == {}
    assert on_disk(worker) == []


@contextlib.asynccontextmanager
async def ending_together(
    plane: FakeControlPlane, tmp_path: Path, count: int, *, padding: int = 0,
    **settings: object,
) -> AsyncIterator[tuple[Worker, list[ExecuteTask], WorkerRegister, asyncio.Event]]:
    """A running worker, talking to a control plane that lists `batches`, whose `count`
    attempts (from one `execute_tasks` frame) have just ended in the same turn of its loop.
    Yields the worker, the attempts, its registration and an event set once all are acked."""
    plane.features = ["batches"]
    tool = TogetherTool(expected=count, padding=padding)
    worker = make_worker(plane, tmp_path, tool, slots=count)
    if settings:
        worker.settings = worker.settings.model_copy(update=settings)
    acked = _noting_acks(worker, count=count)
    async with running(worker):
        register = await plane.expect(WorkerRegister)
        runs = [execute("together") for _ in range(count)]
        await plane.send(ExecuteTasks(tasks=runs))
        await asyncio.wait_for(tool.all_started.wait(), DEADLINE)
        tool.gate.set()
        yield worker, runs, register, acked


async def test_results_that_end_together_travel_in_one_frame(
    plane: FakeControlPlane, tmp_path: Path
) -> None:
    """To a control plane that lists `batches`, the worker lists it too, starts every attempt
    of an `execute_tasks` frame, and sends the results that are ready in the same turn of its
    event loop as one `task_results` frame (ADR 0024)."""
    async with ending_together(plane, tmp_path, 3) as (worker, runs, register, acked):
        assert "batches" in register.features
        batch = await plane.expect(TaskResults)
        assert {r.attempt_id for r in batch.results} == {r.attempt_id for r in runs}
        assert {r.status for r in batch.results} == {"succeeded"}
        await plane.send(Acks(acks=[Ack(attempt_id=r.attempt_id, accepted=True)
                                    for r in runs]))
        await asyncio.wait_for(acked.wait(), DEADLINE)
        assert worker._unacked == {}
    assert on_disk(worker) == []


async def test_a_frame_stays_within_the_workers_result_size_limit(
    plane: FakeControlPlane, tmp_path: Path
) -> None:
    """Results that together would exceed `max_result_bytes` (the most one message may carry)
    go in more than one frame; none is lost."""
    # Each result is about 760 bytes of JSON: three do not fit in 1,024.
    async with ending_together(plane, tmp_path, 3, padding=500,
                               max_result_bytes=1024) as (_, runs, _, _):
        got: list[TaskResult] = []
        frames_seen = 0
        while len(got) < 3:
            message = await plane.expect((TaskResult, TaskResults))  # type: ignore[arg-type]
            frames_seen += 1
            if isinstance(message, TaskResults):
                assert len(message.model_dump_json().encode()) <= 1024
            got.extend(message.results if isinstance(message, TaskResults) else [message])
        assert frames_seen >= 2
        assert {r.attempt_id for r in got} == {r.attempt_id for r in runs}


async def test_a_lone_result_goes_out_at_once_as_a_single_message(
    plane: FakeControlPlane, gate: GateTool, tmp_path: Path
) -> None:
    """With nothing else running, a result cannot be joined by another: it is sent as a plain
    `task_result`, even to a control plane that understands batches."""
    plane.features = ["batches"]
    worker = make_worker(plane, tmp_path, gate)
    async with running(worker):
        await _result_sent(plane, gate)  # a `task_result`, or `expect` fails


async def test_result_is_sent_before_its_outbox_write_and_ack_waits_for_it(
    plane: FakeControlPlane, gate: GateTool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A slow disk does not hold the result back; an ack that comes while the write is under
    way waits for it, then removes the record."""
    monkeypatch.setattr(agent_module, "SAVE_AFTER", 0)  # the write starts right after the send
    worker = make_worker(plane, tmp_path, gate)
    outbox = outbox_of(worker)
    outbox.hold = asyncio.Event()
    async with running(worker):
        await plane.expect(WorkerRegister)
        msg = execute()
        await plane.send(msg)
        await plane.expect(TaskAccepted)
        gate.gate.set()
        result = await plane.expect(TaskResult)
        assert result.attempt_id == msg.attempt_id
        assert not outbox.saved.is_set()  # sent while the write still waits
        await plane.send(Ack(attempt_id=msg.attempt_id, accepted=True))
        outbox.hold.set()
        await asyncio.wait_for(outbox.removed.wait(), DEADLINE)
        assert outbox.saved.is_set()
        assert on_disk(worker) == []


async def test_an_ack_within_save_after_spares_the_outbox_write(
    plane: FakeControlPlane, gate: GateTool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A result acknowledged before SAVE_AFTER has passed is never written to disk."""
    monkeypatch.setattr(agent_module, "SAVE_AFTER", 60.0)
    worker = make_worker(plane, tmp_path, gate)
    outbox = outbox_of(worker)
    acked = _noting_acks(worker)
    async with running(worker):
        await plane.expect(WorkerRegister)
        msg = execute()
        await plane.send(msg)
        gate.gate.set()
        assert (await plane.expect(TaskResult)).attempt_id == msg.attempt_id
        assert msg.attempt_id in worker._deferred  # waiting for its ack, in memory only
        await plane.send(Ack(attempt_id=msg.attempt_id, accepted=True))
        await asyncio.wait_for(acked.wait(), DEADLINE)
        assert msg.attempt_id not in worker._unacked
        assert worker._deferred == {}
        assert worker._saving == {}
        assert not outbox.saved.is_set()
        assert not outbox.removed.is_set()
        assert on_disk(worker) == []


async def _result_sent(plane: FakeControlPlane, gate: GateTool) -> ExecuteTask:
    """Register, run one attempt to its result, and return the attempt's message."""
    await plane.expect(WorkerRegister)
    msg = execute()
    await plane.send(msg)
    gate.gate.set()
    assert (await plane.expect(TaskResult)).attempt_id == msg.attempt_id
    return msg


async def test_a_dropped_connection_writes_the_results_awaiting_their_ack(
    plane: FakeControlPlane, gate: GateTool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sent but unacknowledged when the connection drops: written at once (not SAVE_AFTER
    later), named as buffered on re-registering, and sent again."""
    monkeypatch.setattr(agent_module, "SAVE_AFTER", 60.0)
    worker = make_worker(plane, tmp_path, gate)
    async with running(worker):
        msg = await _result_sent(plane, gate)
        plane.refusing = True
        assert plane.connection is not None
        await plane.connection.close()
        await asyncio.wait_for(outbox_of(worker).saved.wait(), DEADLINE)
        assert [r.attempt_id for r in on_disk(worker)] == [msg.attempt_id]
        plane.refusing = False
        assert (await plane.expect(WorkerRegister)).buffered == [msg.attempt_id]
        assert (await plane.expect(TaskResult)).attempt_id == msg.attempt_id


async def test_stopping_writes_the_results_awaiting_their_ack(
    plane: FakeControlPlane, gate: GateTool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker that stops before a result's ack keeps it on disk for its next start."""
    monkeypatch.setattr(agent_module, "SAVE_AFTER", 60.0)
    worker = make_worker(plane, tmp_path, gate)
    async with running(worker):
        msg = await _result_sent(plane, gate)
        assert on_disk(worker) == []
    assert [r.attempt_id for r in on_disk(worker)] == [msg.attempt_id]


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
        assert worker._unacked == {msg.attempt_id: None}  # re-sent below from the file
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
        assert [t.name for t in register.tools] == ["echo", "evaluator"]
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


async def test_no_free_slot_fails_attempt(plane: FakeControlPlane, gate: GateTool,
                                          tmp_path: Path) -> None:
    """An attempt beyond the worker's slots is answered with a failed result."""
    async with running(make_worker(plane, tmp_path, gate, slots=1)):
        await plane.expect(WorkerRegister)
        await plane.send(execute())
        await plane.expect(TaskAccepted)
        extra = execute()
        await plane.send(extra)
        result = await plane.expect(TaskResult)
        assert (result.attempt_id, result.error) == (extra.attempt_id, "worker has no free slot")


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
