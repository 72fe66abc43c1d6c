"""The worker: one outbound WebSocket to the control plane, and the attempts it runs (DESIGN §5).

`Worker.run()` keeps a connection to `/ws/worker`, reconnecting with exponential backoff and
full jitter. On every connection it registers (naming the attempts it still runs), re-sends the
results the control plane has not acknowledged, and heartbeats. Each `execute_task` runs as its
own task in a private workspace. Attempts do not belong to a connection: they keep running
across reconnects, and every result is written to the on-disk outbox before it is sent and stays
there until an `ack` arrives.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import time
import uuid
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import structlog
from pydantic import BaseModel, ValidationError
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import InvalidStatus, WebSocketException

from shoal import __version__
from shoal.artifacts.paths import check_relative_path
from shoal.config import Settings
from shoal.errors import Forbidden, InvalidInput, ShoalError, Unauthorized, UnsafePath
from shoal.protocol import (
    Ack,
    AgentLog,
    CancelTask,
    ErrorMessage,
    ExecuteTask,
    FilePayload,
    Heartbeat,
    Registered,
    RejectedFile,
    ResultStatus,
    TaskAccepted,
    TaskResult,
    WorkerRegister,
    parse_server_message,
)
from shoal.tools.base import Tool, ToolOutcome, ToolRun
from shoal.tools.registry import create_tools, probe_tools, tool_infos
from shoal.worker.batching import Batcher
from shoal.worker.connection import Backoff, websocket_url
from shoal.worker.logstream import LogStream
from shoal.worker.outbox import Outbox
from shoal.worker.system import load_machine_id, resources, system_info
from shoal.worker.workspace import (
    collect_files,
    is_bare,
    prepare_bare_workspace,
    prepare_workspace,
    prune_workspaces,
    snapshot,
)

log = structlog.get_logger()

REGISTER_TIMEOUT = 30.0  # seconds to open the socket, and again to get `registered`
SHUTDOWN_GRACE = 30.0  # seconds running attempts get to finish after `stop()`
KEEP_WORKSPACES = 20  # task folders kept on disk after their attempts end


PRUNE_EVERY = 10


def io_executor(slots: int) -> ThreadPoolExecutor:
    """Threads for a worker process's file work (workspaces, outbox fsyncs), sized so that
    many attempts finishing at once do not queue behind the default pool's few threads."""
    return ThreadPoolExecutor(max_workers=max(8, min(64, 2 * slots + 4)),
                              thread_name_prefix="shoal-worker-io")


_Prepared = tuple[Path, list[RejectedFile], dict[str, str]]  # workspace, skipped files, snapshot


def _prepare(root: Path, msg: ExecuteTask) -> _Prepared:
    """Make the attempt's workspace and fingerprint it (one thread hop instead of two)."""
    workspace, skipped = prepare_workspace(root, msg)
    return workspace, skipped, snapshot(workspace)


def _workspace_root(path: Path) -> Path:
    """The workspaces folder, created, as an absolute path without symbolic links."""
    path.mkdir(parents=True, exist_ok=True)
    return path.resolve()


@dataclass(slots=True)
class _Attempt:
    """An attempt this worker is running."""

    message: ExecuteTask
    started: float = field(default_factory=time.monotonic)
    task: asyncio.Task[None] | None = None
    cancel_reason: str | None = None
    finishing: bool = False  # its result is being saved; too late to cancel


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
    ) -> None:
        self.url = websocket_url(server_url)
        self._token = token
        self.settings = settings
        self.tools = dict(tools)
        self.name = _checked_name(name or settings.worker_name or socket.gethostname())
        self.slots = _checked_slots(slots or settings.worker_slots)
        self.machine_id = machine_id
        self.home = settings.data_dir / "worker" / self.name
        self.outbox = Outbox(self.home / "outbox")
        self.workspaces = self.home / "workspaces"
        self._workspace_root: Path | None = None  # `workspaces`, created and resolved
        self._preparer: Batcher[ExecuteTask, _Prepared] = Batcher(self._prepare_all)
        self._collector: Batcher[
            tuple[Path, dict[str, str], int], tuple[list[FilePayload], list[RejectedFile]]
        ] = Batcher(self._collect_all)
        self._backoff = backoff or Backoff()
        self._grace = shutdown_grace
        self._heartbeat_interval = settings.heartbeat_interval
        self._system_info: dict[str, object] = {}
        self._running: dict[uuid.UUID, _Attempt] = {}
        self._buffered: set[uuid.UUID] = set()  # results in the outbox, not yet acked
        self._conn: ClientConnection | None = None
        self._connected = asyncio.Event()
        self._stopping = asyncio.Event()
        self._group: asyncio.TaskGroup | None = None
        self._fatal: ShoalError | None = None
        self._finished = 0  # attempts finished; workspaces are pruned every PRUNE_EVERY

    @property
    def running(self) -> list[uuid.UUID]:
        """The attempts executing right now."""
        return list(self._running)

    async def run(self) -> None:
        """Serve until `stop()`; raise `Unauthorized`/`Forbidden` if the token is refused."""
        await self._load_state()
        async with asyncio.TaskGroup() as group:
            self._group = group
            connection = group.create_task(self._keep_connected(), name="worker-connection")
            heartbeats = group.create_task(self._send_heartbeats(), name="worker-heartbeats")
            await self._stopping.wait()
            await self._drain()
            connection.cancel()
            heartbeats.cancel()
        self._group = None
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
        self._buffered = {result.attempt_id for result in await self.outbox.pending()}
        self._workspace_root = await asyncio.to_thread(_workspace_root, self.workspaces)

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
                log.warning("worker.disconnected", url=self.url, error=_describe(exc))
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
            logger=_quiet_websocket_logger(),
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
                 running=len(self._running), buffered=len(self._buffered))
        self._conn = conn
        self._connected.set()
        try:
            await self._resend_pending()
            async for raw in conn:
                await self._handle(raw)
        finally:
            self._conn = None
            self._connected.clear()

    async def _register(self, conn: ClientConnection) -> Registered:
        await conn.send(self._registration().model_dump_json())
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

    def _registration(self) -> WorkerRegister:
        return WorkerRegister(
            machine_id=self.machine_id or self.name,
            machine_name=self.name,
            system_info=self._system_info,
            tools=tool_infos(self.tools),
            slots=self.slots,
            running=self.running,
            buffered=sorted(self._buffered),
            version=__version__,
        )

    async def _resend_pending(self) -> None:
        for result in await self.outbox.pending():
            if not await self._send(result):
                return

    async def _send(self, message: BaseModel) -> bool:
        """Send `message` if connected; False when it could not go out (it is not retried)."""
        conn = self._conn
        if conn is None:
            return False
        try:
            await conn.send(message.model_dump_json())
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
        if isinstance(message, ExecuteTask):
            await self._start(message)
        elif isinstance(message, CancelTask):
            self._cancel(message)
        elif isinstance(message, Ack):  # the removal is batched: do not hold up the reader
            self._tasks().create_task(self._forget(message))
        elif isinstance(message, Registered):
            self._heartbeat_interval = max(message.heartbeat_interval, 0.01)
        else:
            log.warning("worker.control_plane_error", code=message.code, message=message.message)

    async def _start(self, msg: ExecuteTask) -> None:
        attempt_id = msg.attempt_id
        if attempt_id in self._running or attempt_id in self._buffered:
            log.info("worker.duplicate_attempt_ignored", attempt_id=str(attempt_id))
            return
        refusal = self._refusal()
        if refusal is not None:
            await self._finish(_failed(_Attempt(msg), refusal))
            return
        attempt = _Attempt(msg)
        self._running[attempt_id] = attempt
        attempt.task = self._tasks().create_task(
            self._run_attempt(attempt), name=f"attempt-{attempt_id}"
        )

    def _refusal(self) -> str | None:
        if self._stopping.is_set():
            return "worker is shutting down"
        if len(self._running) >= self.slots:
            return "worker has no free slot"
        return None

    def _tasks(self) -> asyncio.TaskGroup:
        if self._group is None:
            raise RuntimeError("Worker.run() is not running")
        return self._group

    def _cancel(self, msg: CancelTask) -> None:
        attempt = self._running.get(msg.attempt_id)
        if attempt is None or attempt.task is None or attempt.finishing:
            log.info("worker.cancel_ignored", attempt_id=str(msg.attempt_id))
            return
        if attempt.cancel_reason is None:  # a second cancel must not count twice
            attempt.cancel_reason = msg.reason or "cancelled by the control plane"
            attempt.task.cancel()

    async def _forget(self, ack: Ack) -> None:
        try:
            await self.outbox.remove(ack.attempt_id)
        except OSError:  # it stays buffered: re-sent after a reconnect, and refused
            log.warning("worker.outbox_remove_failed", attempt_id=str(ack.attempt_id),
                        exc_info=True)
            return
        self._buffered.discard(ack.attempt_id)
        log.info("worker.result_acknowledged", attempt_id=str(ack.attempt_id),
                 accepted=ack.accepted, reason=ack.reason)

    # ---- attempts ------------------------------------------------------------------------

    async def _run_attempt(self, attempt: _Attempt) -> None:
        """Run one attempt to a result, buffer it durably, then send it."""
        try:
            result = await self._outcome(attempt)
            attempt.finishing = True
            await self._save(result)
        finally:
            self._running.pop(attempt.message.attempt_id, None)
        await self._send(result)
        log.info("worker.attempt_finished", attempt_id=str(result.attempt_id),
                 status=result.status, seconds=round(result.duration_seconds, 3))
        await self._prune_workspaces()

    async def _outcome(self, attempt: _Attempt) -> TaskResult:
        try:
            result = await self._execute(attempt)
        except asyncio.CancelledError:
            if not _absorb_cancel(attempt):
                raise
            return _cancelled(attempt)
        except Exception as exc:  # a bug here must fail one attempt, not the worker
            log.exception("worker.attempt_crashed", attempt_id=str(attempt.message.attempt_id))
            return _failed(attempt, f"The worker failed while running the attempt: {exc}")
        if _absorb_cancel(attempt):  # the tool swallowed the cancellation
            return _cancelled(attempt)
        return result

    async def _execute(self, attempt: _Attempt) -> TaskResult:
        msg = attempt.message
        await self._send(TaskAccepted(attempt_id=msg.attempt_id))
        tool = self.tools.get(msg.tool)
        if tool is None:
            have = ", ".join(sorted(self.tools)) or "none"
            return _failed(attempt, f"This worker has no tool {msg.tool!r}; it has: {have}.")
        # An attempt that brings no files gets its folder right here (one or two mkdir
        # calls); one with upstream files, or a folder left by an earlier run, goes to a thread.
        bare = (prepare_bare_workspace(self._workspace_root, msg)
                if self._workspace_root is not None else None)
        skipped: list[RejectedFile] = []
        before: dict[str, str] = {}
        if bare is not None:  # nothing to write into it, so nothing to fingerprint either
            workspace = bare
        else:
            try:
                workspace, skipped, before = await self._preparer.run(msg)
            except OSError as exc:
                return _failed(attempt, f"Could not prepare the workspace: {exc}")
        stream = LogStream()
        for file in skipped:
            stream.write(f"[shoal] upstream file {file.path} skipped: {file.reason}")
        status, outcome = await self._run_tool(tool, _tool_run(msg, workspace, stream), stream)
        files, rejected = await self._collect(workspace, before, outcome)
        return _result(attempt, status, outcome=outcome, files=files, rejected=rejected)

    async def _run_tool(
        self, tool: Tool, run: ToolRun, stream: LogStream
    ) -> tuple[ResultStatus, ToolOutcome]:
        """Run the tool under its time limit while its log lines flow out beside it."""
        async with asyncio.TaskGroup() as group:
            group.create_task(self._forward_logs(run.attempt_id, stream))
            try:
                return await _call_tool(tool, run)
            finally:
                stream.close()

    async def _forward_logs(self, attempt_id: uuid.UUID, stream: LogStream) -> None:
        async for text in stream.batches():
            await self._send(AgentLog(attempt_id=attempt_id, message=text))

    async def _collect(
        self, workspace: Path, before: dict[str, str], outcome: ToolOutcome
    ) -> tuple[list[FilePayload], list[RejectedFile]]:
        if not before and is_bare(workspace):  # the tool wrote nothing: no thread hop
            return [], []
        # Files travel in base64 (4/3 larger) beside the output; keep the whole message
        # under max_result_bytes so it can never be too big to deliver.
        room = self.settings.max_result_bytes * 3 // 4 - len(outcome.output.encode())
        try:
            return await self._collector.run((workspace, before, max(room, 0)))
        except OSError as exc:
            return [], [RejectedFile(path=".", reason=f"files could not be collected: {exc}")]

    def _prepare_all(self, messages: list[ExecuteTask]) -> list[_Prepared | Exception]:
        """Make the workspaces of `messages` (one thread job for a burst of attempts)."""
        if self._workspace_root is None:
            self._workspace_root = _workspace_root(self.workspaces)
        out: list[_Prepared | Exception] = []
        for msg in messages:
            try:
                bare = prepare_bare_workspace(self._workspace_root, msg)
                # A bare workspace has nothing to fingerprint.
                out.append((bare, [], {}) if bare is not None else _prepare(self.workspaces, msg))
            except Exception as exc:  # that attempt fails; the others go on
                out.append(exc)
        return out

    def _collect_all(
        self, jobs: list[tuple[Path, dict[str, str], int]]
    ) -> list[tuple[list[FilePayload], list[RejectedFile]] | Exception]:
        """The files each finished attempt produced (one thread job for a burst)."""
        out: list[tuple[list[FilePayload], list[RejectedFile]] | Exception] = []
        for workspace, before, room in jobs:
            try:
                out.append(collect_files(
                    workspace, before, max_files=self.settings.max_files_per_result,
                    max_file_bytes=self.settings.max_file_bytes, max_total_bytes=room))
            except Exception as exc:
                out.append(exc)
        return out

    async def _save(self, result: TaskResult) -> None:
        try:
            await self.outbox.save(result)
        except OSError:  # still sent below; lost only if the connection is down as well
            log.exception("worker.outbox_write_failed", attempt_id=str(result.attempt_id))
            return
        self._buffered.add(result.attempt_id)

    async def _finish(self, result: TaskResult) -> None:
        await self._save(result)
        await self._send(result)

    async def _prune_workspaces(self) -> None:
        self._finished += 1
        if self._finished % PRUNE_EVERY:
            return
        protect = {str(a.message.task_id) for a in self._running.values()}
        try:
            await asyncio.to_thread(prune_workspaces, self.workspaces, keep=KEEP_WORKSPACES,
                                    protect=protect)
        except OSError:
            log.warning("worker.prune_failed", exc_info=True)

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


async def _call_tool(tool: Tool, run: ToolRun) -> tuple[ResultStatus, ToolOutcome]:
    """Run `tool` under the attempt's time limit; its errors become a failed outcome."""
    scope = asyncio.timeout(run.timeout)
    try:
        async with scope:
            outcome = await tool.run(run)
    except TimeoutError as exc:
        if not scope.expired():
            return "failed", ToolOutcome(status="failed", error=_describe(exc))
        limit = f"The attempt ran past its time limit of {run.timeout:g} seconds and was stopped."
        return "timed_out", ToolOutcome(status="failed", error=limit)
    except Exception as exc:
        log.warning("worker.tool_failed", attempt_id=str(run.attempt_id), exc_info=True)
        return "failed", ToolOutcome(status="failed", error=_describe(exc))
    return outcome.status, outcome


def _tool_run(msg: ExecuteTask, workspace: Path, stream: LogStream) -> ToolRun:
    return ToolRun(
        attempt_id=msg.attempt_id,
        task_id=msg.task_id,
        subtask_id=msg.subtask_id,
        role=msg.role,
        name=msg.name,
        instructions=msg.instructions,
        workspace=workspace,
        timeout=msg.timeout,
        log=stream.write,
        options=dict(msg.options),
    )


def _result(
    attempt: _Attempt,
    status: ResultStatus,
    *,
    outcome: ToolOutcome,
    files: list[FilePayload] | None = None,
    rejected: list[RejectedFile] | None = None,
) -> TaskResult:
    return TaskResult(
        attempt_id=attempt.message.attempt_id,
        fence=attempt.message.fence,
        status=status,
        output=outcome.output,
        files=files or [],
        rejected_files=rejected or [],
        usage=outcome.usage,
        error=outcome.error,
        duration_seconds=time.monotonic() - attempt.started,
        denials=[d.as_dict() for d in outcome.denials],
    )


def _failed(attempt: _Attempt, error: str) -> TaskResult:
    return _result(attempt, "failed", outcome=ToolOutcome(status="failed", error=error))


def _cancelled(attempt: _Attempt) -> TaskResult:
    error = f"Cancelled: {attempt.cancel_reason}"
    return _result(attempt, "cancelled", outcome=ToolOutcome(status="failed", error=error))


def _absorb_cancel(attempt: _Attempt) -> bool:
    """True if the pending cancellation is the one this attempt asked for (then clear it)."""
    if attempt.cancel_reason is None:
        return False
    task = asyncio.current_task()
    # Anything left after uncancel() is a second cancellation (e.g. the worker is dying).
    return task is None or task.uncancel() == 0


def _describe(exc: BaseException) -> str:
    if isinstance(exc, ShoalError):
        return exc.message
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


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


def _quiet_websocket_logger() -> logging.Logger:
    """A logger for websockets that never logs at DEBUG, where it would print the token."""
    logger = logging.getLogger("shoal.worker.websocket")
    logger.setLevel(logging.INFO)
    return logger


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
    worker = Worker(server_url, token, settings, tools=create_tools(settings, probes),
                    name=name, slots=slots)
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
