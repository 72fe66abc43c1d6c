"""The worker: one outbound WebSocket to the control plane, and the attempts it runs (DESIGN §5).

`Worker.run()` keeps a connection to `/ws/worker`, reconnecting with exponential backoff and
full jitter. On every connection it registers (naming the attempts it still runs), re-sends the
results the control plane has not acknowledged, and heartbeats. Each `execute_task` runs as its
own task in a private workspace. Attempts do not belong to a connection: they keep running
across reconnects. Every result is kept until an `ack` arrives (`shoal.worker.delivery`): in
memory, and in the on-disk outbox, which is written beside the send rather than before it (ADR
0013) so a worker that crashes after an attempt finished still has the result to re-send when it
comes back.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import uuid
from collections.abc import Coroutine, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import structlog
from pydantic import BaseModel, ValidationError
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import InvalidStatus, WebSocketException

from shoal import __version__, heap
from shoal.artifacts.paths import check_relative_path
from shoal.config import Settings
from shoal.errors import Forbidden, InvalidInput, ShoalError, Unauthorized, UnsafePath
from shoal.protocol import (
    MAX_KEPT,
    WORKER_FEATURES,
    Ack,
    Acks,
    CancelTask,
    ErrorMessage,
    ExecuteTask,
    ExecuteTasks,
    ForgetTasks,
    Heartbeat,
    Registered,
    ResendResults,
    ServerMessage,
    WorkerRegister,
    parse_server_message,
)
from shoal.tools.base import Tool
from shoal.tools.registry import create_tools, probe_tools, tool_infos
from shoal.tracing import Tracing, configure
from shoal.worker.connection import (
    Backoff,
    WorkerConnection,
    quiet_websocket_logger,
    send_now,
    websocket_url,
)
from shoal.worker.delivery import Delivery
from shoal.worker.executor import (
    READY_WORKSPACES,
    Attempt,
    Executor,
    declined,
    describe,
    failed,
)
from shoal.worker.outbox import Outbox
from shoal.worker.system import load_machine_id, resources, system_info
from shoal.worker.workspace import forget, kept

log = structlog.get_logger()

REGISTER_TIMEOUT = 30.0  # seconds to open the socket, and again to get `registered`
SHUTDOWN_GRACE = 30.0  # seconds running attempts get to finish after `stop()`


def io_executor(slots: int) -> ThreadPoolExecutor:
    """Threads for a worker process's file work (workspaces, outbox fsyncs), sized so that
    many attempts finishing at once do not queue behind the default pool's few threads."""
    return ThreadPoolExecutor(max_workers=max(8, min(64, 2 * slots + 4)),
                              thread_name_prefix="shoal-worker-io")


class _RegistrationFailed(Exception):
    """The control plane answered `worker_register` with something other than `registered`."""


class Worker:
    """A worker process: dials out to the control plane and runs attempts with its tools."""

    def __init__(
        self,
        server_url: str,
        token: str,
        settings: Settings,
        *,
        tools: Mapping[str, Tool],
        name: str | None = None,
        slots: int | None = None,
        machine_id: str | None = None,
        backoff: Backoff | None = None,
        shutdown_grace: float = SHUTDOWN_GRACE,
        tracing: Tracing | None = None,
    ) -> None:
        self.url = websocket_url(server_url)
        self._token = token
        self.settings = settings
        self.tools = dict(tools)
        self.name = _checked_name(name or settings.worker_name or socket.gethostname())
        self.slots = _checked_slots(slots or settings.worker_slots)
        self.machine_id = machine_id
        self.home = settings.data_dir / "worker" / self.name
        self.workspaces = self.home / "workspaces"
        # where the bundled MCP servers of its attempts keep their search indexes
        # (`shoal.tools.mcp_config.launch`: the data folder's `index/`)
        self.indexes = settings.data_dir / "index"
        self._executor = Executor(settings, self.tools, self.workspaces, self._send,
                                  ready=min(self.slots, READY_WORKSPACES), tracing=tracing)
        self._backoff = backoff or Backoff()
        self._grace = shutdown_grace
        self._heartbeat_interval = settings.heartbeat_interval
        self._system_info: dict[str, object] = {}
        self._running: dict[uuid.UUID, Attempt] = {}
        self.delivery = Delivery(Outbox(self.home / "outbox"), self._send, self._spawn,
                                 self._running, max_bytes=settings.max_result_bytes)
        self._conn: ClientConnection | None = None
        self._server_features: frozenset[str] = frozenset()  # of the current connection
        self._connected = asyncio.Event()
        self._stopping = asyncio.Event()
        self._group: asyncio.TaskGroup | None = None
        self._fatal: ShoalError | None = None

    @property
    def running(self) -> list[uuid.UUID]:
        """The attempts executing right now."""
        return list(self._running)

    async def run(self) -> None:
        """Serve until `stop()`; raise `Unauthorized`/`Forbidden` if the token is refused."""
        await self._load_state()
        heap.settle()
        async with asyncio.TaskGroup() as group:
            self._group = group
            connection = group.create_task(self._keep_connected(), name="worker-connection")
            heartbeats = group.create_task(self._send_heartbeats(), name="worker-heartbeats")
            await self._stopping.wait()
            await self._drain()
            self.delivery.save_deferred()  # kept on disk for the next start unless acked meanwhile
            connection.cancel()
            heartbeats.cancel()
        self._group = None
        await asyncio.to_thread(self.delivery.outbox.close)
        log.info("worker.stopped", worker=self.name)
        if self._fatal is not None:
            raise self._fatal

    def stop(self, *, grace: float | None = None) -> None:
        """Stop taking attempts; give running ones `grace` seconds to finish, then cancel them."""
        if grace is not None:
            self._grace = grace
        self._stopping.set()

    async def _load_state(self) -> None:
        if self.machine_id is None:
            self.machine_id = await asyncio.to_thread(load_machine_id, self.home / "machine_id")
        self._system_info = await asyncio.to_thread(system_info, self.settings.data_dir)
        await self.delivery.load()
        await self._executor.open()

    # ---- connection ----------------------------------------------------------------------

    async def _keep_connected(self) -> None:
        try:
            await self._connect_forever()
        except (Unauthorized, Forbidden) as exc:
            self._fatal = exc
            self.stop(grace=0)

    async def _connect_forever(self) -> None:
        while True:
            try:
                async with self._connect() as conn:
                    await self._serve(conn)
            except InvalidStatus as exc:
                status = exc.response.status_code
                if status in (401, 403):
                    raise self._token_refused(status) from None
                log.warning("worker.connect_refused", url=self.url, status=status)
            except (OSError, TimeoutError, WebSocketException, _RegistrationFailed) as exc:
                log.warning("worker.disconnected", url=self.url, error=describe(exc))
            delay = self._backoff.next_delay()
            log.info("worker.reconnecting", url=self.url, in_seconds=round(delay, 2))
            await asyncio.sleep(delay)

    def _connect(self) -> connect:
        return connect(
            self.url,
            additional_headers={"Authorization": f"Bearer {self._token}"},
            open_timeout=REGISTER_TIMEOUT,
            # Upstream files arrive inline in base64; allow what a result may carry, and more.
            max_size=self.settings.max_result_bytes * 2,
            compression="deflate" if self.settings.worker_compression else None,
            logger=quiet_websocket_logger(),
            create_connection=WorkerConnection,
        )

    def _token_refused(self, status: int) -> ShoalError:
        error = Forbidden if status == 403 else Unauthorized
        return error(
            f"The control plane refused the worker token (HTTP {status}): create one with "
            f"`shoal token create --worker {self.name}` and pass it with --token."
        )

    async def _serve(self, conn: ClientConnection) -> None:
        """Register on a fresh connection, re-send buffered results, then handle messages."""
        registered = await self._register(conn)
        self._backoff.reset()
        # Reconnect well within a lease, so a control-plane restart does not expire our attempts.
        self._backoff.cap = min(self._backoff.cap, max(registered.lease_seconds / 3, 0.5))
        self._heartbeat_interval = max(registered.heartbeat_interval, 0.01)
        log.info("worker.registered", url=self.url, worker_id=str(registered.worker_id),
                 running=len(self._running), buffered=len(self.delivery.unacked))
        self._conn = conn
        self._server_features = frozenset(registered.features)
        self._executor.stream_tokens = "agent_tokens" in self._server_features
        self.delivery.batching = "batches" in self._server_features
        self.delivery.max_bytes = self.settings.max_result_bytes
        self._connected.set()
        if isinstance(conn, WorkerConnection):
            conn.take = self._take
        try:
            await self.delivery.resend()
            async for raw in conn:
                await self._handle(raw)
        finally:
            if isinstance(conn, WorkerConnection):
                conn.take = None
            self._conn = None
            self.delivery.batching = False
            self._connected.clear()
            self.delivery.save_deferred()  # sent, but whether they arrived is unknown now

    async def _register(self, conn: ClientConnection) -> Registered:
        tasks, sources = await asyncio.to_thread(kept, self.workspaces, self.indexes,
                                                 most=MAX_KEPT)
        await conn.send(self._registration(tasks, sources).model_dump_json())
        async with asyncio.timeout(REGISTER_TIMEOUT):
            raw = await conn.recv()
        try:
            reply = parse_server_message(raw)
        except ValidationError as exc:
            raise _RegistrationFailed(f"unreadable answer to worker_register: {exc}") from None
        if isinstance(reply, Registered):
            return reply
        if isinstance(reply, ErrorMessage) and reply.code in ("unauthorized", "forbidden"):
            raise self._token_refused(401 if reply.code == "unauthorized" else 403)
        raise _RegistrationFailed(f"expected `registered`, got {reply.model_dump_json()[:300]}")

    def _registration(self, tasks: list[uuid.UUID] | None = None,
                      sources: list[str] | None = None) -> WorkerRegister:
        return WorkerRegister(
            machine_id=self.machine_id or self.name,
            machine_name=self.name,
            system_info=self._system_info,
            tools=tool_infos(self.tools),
            slots=self.slots,
            running=self.running,
            buffered=sorted(self.delivery.unacked),
            version=__version__,
            features=list(WORKER_FEATURES),
            kept_tasks=tasks or [],
            kept_sources=sources or [],
        )

    async def _send(self, message: BaseModel, text: str | None = None) -> bool:
        """Send `message` (as `text`, its JSON, when the caller has it) if connected; False
        when it could not go out (it is not retried)."""
        conn = self._conn
        if conn is None:
            return False
        text = text or message.model_dump_json()
        try:
            if not send_now(conn, text):
                await conn.send(text)
        except WebSocketException:
            return False
        return True

    async def _send_heartbeats(self) -> None:
        while True:
            await self._connected.wait()
            await asyncio.sleep(self._heartbeat_interval)
            cpu, memory, disk = await self._measure()
            await self._send(Heartbeat(cpu_percent=cpu, memory_percent=memory,
                                       disk_percent=disk, running=self.running))

    async def _measure(self) -> tuple[float, float, float]:
        try:
            return await asyncio.to_thread(resources, self.home)
        except Exception:  # a heartbeat without load figures beats no heartbeat
            log.warning("worker.resources_unavailable", exc_info=True)
            return 0.0, 0.0, 0.0

    # ---- messages from the control plane -------------------------------------------------

    async def _handle(self, raw: str | bytes) -> None:
        try:
            message = parse_server_message(raw)
        except ValidationError as exc:
            log.warning("worker.unreadable_message", error=str(exc)[:500])
            return
        if self._settle(message):
            return
        if isinstance(message, ExecuteTask):
            await self._start(message)
        elif isinstance(message, ExecuteTasks):
            for task in message.tasks:
                await self._start(task)
        elif isinstance(message, ForgetTasks):  # disk work: do not hold up the reader
            self._tasks().create_task(self._forget_tasks(message))
        elif isinstance(message, ResendResults):
            held = set(message.attempt_ids).intersection(self.delivery.unacked)
            log.info("worker.results_asked", asked=len(message.attempt_ids), held=len(held))
            await self.delivery.resend(held)
        elif isinstance(message, ErrorMessage):
            log.warning("worker.control_plane_error", code=message.code, message=message.message)

    def _take(self, raw: str) -> bool:
        """Handle `raw` as it arrives (`WorkerConnection.take`) if that needs no wait: the
        messages of a step (attempts there is a slot for, acks, cancellations); False for any
        other, or one to refuse or unreadable, which the reader then handles as before."""
        try:
            message = parse_server_message(raw)
        except ValidationError:
            return False
        tasks = ([message] if isinstance(message, ExecuteTask) else
                 message.tasks if isinstance(message, ExecuteTasks) else None)
        if tasks is None:
            return self._settle(message)
        if self._refusal(len(tasks)) is not None:
            return False
        for task in tasks:
            self._begin(task)
        return True

    def _settle(self, message: ServerMessage) -> bool:
        """Handle a message that needs no wait and starts nothing (an ack, a cancellation, a
        new heartbeat interval); False for any other."""
        if isinstance(message, Ack):
            self.delivery.acknowledged(message)
        elif isinstance(message, Acks):
            for ack in message.acks:
                self.delivery.acknowledged(ack)
        elif isinstance(message, CancelTask):
            self._cancel(message)
        elif isinstance(message, Registered):
            self._heartbeat_interval = max(message.heartbeat_interval, 0.01)
        else:
            return False
        return True

    async def _start(self, msg: ExecuteTask) -> None:
        refusal = None if self._duplicate(msg) else self._refusal()
        if refusal is not None:  # not the step's failure, where the control plane can tell
            answer = declined if "declines" in self._server_features else failed
            await self.delivery.deliver(answer(Attempt(msg), refusal))
            return
        self._begin(msg)

    def _begin(self, msg: ExecuteTask) -> None:
        """Start an attempt there is a slot for (unless it is one this worker already has)."""
        if self._duplicate(msg):
            log.info("worker.duplicate_attempt_ignored", attempt_id=str(msg.attempt_id))
            return
        attempt = Attempt(msg)
        self._running[msg.attempt_id] = attempt
        attempt.task = self._tasks().create_task(
            self._run_attempt(attempt), name=f"attempt-{msg.attempt_id}"
        )

    def _duplicate(self, msg: ExecuteTask) -> bool:
        return msg.attempt_id in self._running or msg.attempt_id in self.delivery.unacked

    def _refusal(self, starting: int = 1) -> str | None:
        """Why this worker cannot start `starting` more attempts now (None: it can)."""
        if self._stopping.is_set():
            return "worker is shutting down"
        if len(self._running) + starting > self.slots:
            return "worker has no free slot"
        return None

    def _tasks(self) -> asyncio.TaskGroup:
        if self._group is None:
            raise RuntimeError("Worker.run() is not running")
        return self._group

    def _spawn(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None] | None:
        """Run `work` in the worker's task group; None (and `work` closed) when not running."""
        if self._group is None:
            work.close()
            return None
        return self._group.create_task(work)

    def _cancel(self, msg: CancelTask) -> None:
        attempt = self._running.get(msg.attempt_id)
        if attempt is None or attempt.task is None or attempt.finishing:
            log.info("worker.cancel_ignored", attempt_id=str(msg.attempt_id))
            return
        if attempt.cancel_reason is None:  # a second cancel must not count twice
            attempt.cancel_reason = msg.reason or "cancelled by the control plane"
            attempt.task.cancel()

    async def _forget_tasks(self, msg: ForgetTasks) -> None:
        """Delete what this worker keeps of deleted tasks and of sources stored no more."""
        running = {str(a.message.task_id) for a in self._running.values()}
        try:
            tasks, indexes = await asyncio.to_thread(
                forget, self.workspaces, self.indexes, msg.task_ids, msg.sources,
                protect=running)
        except OSError:
            log.warning("worker.forget_failed", exc_info=True)
            return
        log.info("worker.forgot", tasks=tasks, index_files=indexes)

    # ---- attempts ------------------------------------------------------------------------

    async def _run_attempt(self, attempt: Attempt) -> None:
        """Run one attempt to a result, then deliver it."""
        try:
            result = await self._executor.outcome(attempt)
            attempt.finishing = True
        finally:
            self._running.pop(attempt.message.attempt_id, None)
        await self.delivery.deliver(result)
        log.info("worker.attempt_finished", attempt_id=str(result.attempt_id),
                 status=result.status, seconds=round(result.duration_seconds, 3))
        await self._executor.finished(self._running.values())

    async def _drain(self) -> None:
        """Let running attempts finish within the grace period, then cancel the rest."""
        pending = [a.task for a in self._running.values() if a.task is not None]
        if pending and self._grace > 0:
            log.info("worker.draining", attempts=len(pending), grace_seconds=self._grace)
            await asyncio.wait(pending, timeout=self._grace)
        for attempt in list(self._running.values()):
            if attempt.task is not None and not attempt.finishing and not attempt.cancel_reason:
                attempt.cancel_reason = "the worker shut down before the attempt finished"
                attempt.task.cancel()
        remaining = [a.task for a in self._running.values() if a.task is not None]
        if remaining:
            await asyncio.wait(remaining)


def _checked_name(name: str) -> str:
    """A worker name usable on the wire (1 to 100 characters) and as one folder name."""
    try:
        safe = check_relative_path(name)
    except UnsafePath as exc:
        raise InvalidInput(f"Worker name {name!r} is not usable: {exc.message}") from None
    if "/" in safe or safe != name or len(name) > 100:
        raise InvalidInput(
            f"Worker name {name!r} is not usable: use up to 100 characters without '/'."
        )
    return name


def _checked_slots(slots: int) -> int:
    if not 1 <= slots <= 256:
        raise InvalidInput(f"A worker has 1 to 256 slots, not {slots}. Pass e.g. --slots 2.")
    return slots


async def run_worker(
    settings: Settings,
    server_url: str,
    token: str,
    *,
    name: str | None = None,
    slots: int | None = None,
) -> None:
    """Discover this machine's tools and run a worker until SIGINT/SIGTERM."""
    probes = await probe_tools(settings)
    for probe in probes:
        if probe.available:
            log.info("worker.tool_found", tool=probe.name, version=probe.version,
                     detail=probe.detail)
        else:
            log.info("worker.tool_missing", tool=probe.name, reason=probe.detail,
                     enable=probe.enable)
    tracing = configure("shoal-worker")  # None unless OTEL_EXPORTER_OTLP_ENDPOINT is set
    worker = Worker(server_url, token, settings, tools=create_tools(settings, probes),
                    name=name, slots=slots, tracing=tracing)
    loop = asyncio.get_running_loop()
    loop.set_default_executor(io_executor(worker.slots))
    signals = (signal.SIGINT, signal.SIGTERM)
    for sig in signals:
        with contextlib.suppress(NotImplementedError, RuntimeError):  # Windows, non-main thread
            loop.add_signal_handler(sig, worker.stop)
    try:
        await worker.run()
    finally:
        for sig in signals:
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(sig)
        if tracing is not None:
            await tracing.close()
