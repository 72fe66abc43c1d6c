"""A tiny fake control plane speaking the worker protocol, and the tools and helpers the
worker tests drive a real `Worker` with."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from http import HTTPStatus
from pathlib import Path
from typing import TypeVar

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from shoal.config import Settings
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
    Usage,
    WorkerMessage,
    WorkerRegister,
    parse_worker_message,
)
from shoal.tools.base import Tool, ToolOutcome, ToolRun
from shoal.worker.agent import Worker
from shoal.worker.connection import Backoff
from shoal.worker.outbox import Outbox, read_pending

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


def make_worker(plane: FakeControlPlane, data_dir: Path, *tools: Tool, slots: int = 2) -> Worker:
    """A worker with fast reconnects, pointed at `plane`."""
    settings = Settings(mode="dev", data_dir=data_dir)
    worker = Worker(plane.url, plane.token, settings, tools={t.name: t for t in tools},
                    name="test-worker", slots=slots, backoff=Backoff(base=0.01, cap=0.05))
    worker.delivery.outbox = SignallingOutbox(worker.delivery.outbox.directory)
    return worker


def outbox_of(worker: Worker) -> SignallingOutbox:
    """The test outbox `make_worker` installed."""
    assert isinstance(worker.delivery.outbox, SignallingOutbox)
    return worker.delivery.outbox


def on_disk(worker: Worker) -> list[TaskResult]:
    """The results a restarted `worker` would find in its outbox."""
    return read_pending(worker.delivery.outbox.directory)


def noting_acks(worker: Worker, count: int = 1) -> asyncio.Event:
    """An event set once the worker has handled `count` acks: forgotten at once when the
    result was only in memory (or acknowledged already), else once its outbox record is
    removed."""
    handled = asyncio.Event()
    delivery = worker.delivery
    acknowledged, remove_saved = delivery.acknowledged, delivery.remove_saved
    seen: list[uuid.UUID] = []

    def note(attempt_id: uuid.UUID) -> None:
        seen.append(attempt_id)
        if len(seen) >= count:
            handled.set()

    def noted(ack: Ack) -> None:
        on_disk = ack.attempt_id in delivery.unacked and ack.attempt_id not in delivery.deferred
        acknowledged(ack)
        if not on_disk:
            note(ack.attempt_id)

    async def removed(attempt_id: uuid.UUID) -> None:
        await remove_saved(attempt_id)
        note(attempt_id)

    delivery.acknowledged = noted  # type: ignore[method-assign]
    delivery.remove_saved = removed  # type: ignore[method-assign]
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

