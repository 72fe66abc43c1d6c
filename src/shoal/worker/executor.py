"""Running one attempt: its workspace, its tool under a time limit, and the files it produced.

The connection side of the worker (`agent.py`) hands each `execute_task` to `Executor.outcome`,
which always returns a `TaskResult`: a tool that fails, times out, is cancelled or crashes the
attempt becomes a result saying so, never an exception that takes the worker down.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from collections.abc import Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog
from pydantic import BaseModel

from shoal import process
from shoal.config import Settings
from shoal.errors import ShoalError
from shoal.limits import storable_text
from shoal.protocol import (
    AgentLog,
    AgentTokens,
    AttemptUsage,
    ExecuteTask,
    FilePayload,
    RejectedFile,
    ResultStatus,
    TaskAccepted,
    TaskResult,
    Usage,
)
from shoal.tools.base import Tool, ToolOutcome, ToolRun
from shoal.worker.batching import Batcher
from shoal.worker.logstream import LogStream
from shoal.worker.tokenstream import TokenStream
from shoal.worker.workspace import (
    collect_files,
    file_away,
    is_bare,
    make_ready,
    prepare_bare_workspace,
    prepare_workspace,
    prune_workspaces,
    reset_ready,
    snapshot,
    snapshot_one,
    workspace_path,
)

if TYPE_CHECKING:
    from shoal.tracing import AttemptTrace, Tracing

log = structlog.get_logger()

KEEP_WORKSPACES = 20  # task folders kept on disk after their attempts end
PRUNE_EVERY = 10  # attempts between two prunes of old workspaces…
PRUNE_SECONDS = 1.0  # … and seconds, at least (a burst of attempts prunes once, not tenfold)
PUT_AWAY_EVERY = 16  # used ready folders gathered before one thread job puts them away
READY_WORKSPACES = 64  # most empty attempt folders kept made ahead of need (ADR 0017)
ACCEPT_AFTER = 0.25  # seconds an attempt runs before `task_accepted` is sent for it (ADR 0017)


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
class Attempt:
    """An attempt this worker is running."""

    message: ExecuteTask
    started: float = field(default_factory=time.monotonic)
    task: asyncio.Task[None] | None = None
    cancel_reason: str | None = None
    finishing: bool = False  # its result is being saved; too late to cancel
    trace: AttemptTrace | None = None  # its span, when this worker traces


class Executor:
    """Runs attempts with this worker's tools, each in its own workspace."""

    def __init__(self, settings: Settings, tools: Mapping[str, Tool], workspaces: Path,
                 send: Callable[[BaseModel], Coroutine[Any, Any, bool]], *,
                 ready: int = READY_WORKSPACES, tracing: Tracing | None = None) -> None:
        self.settings = settings
        self.tracing = tracing
        self.tools = tools
        self.workspaces = workspaces
        self._send = send
        self._workspace_root: Path | None = None  # `workspaces`, created and resolved
        self._preparer: Batcher[ExecuteTask, _Prepared] = Batcher(self._prepare_all)
        self._collector: Batcher[
            tuple[Path, dict[str, str], int], tuple[list[FilePayload], list[RejectedFile]]
        ] = Batcher(self._collect_all)
        self._finished = 0  # attempts finished; workspaces are pruned every PRUNE_EVERY
        self._next_prune = 0.0  # and not before this time (`time.monotonic()`)
        self._background: set[asyncio.Task[bool]] = set()  # `task_accepted` sends
        # Empty folders made ahead of need, so an attempt that brings no files starts without
        # a folder creation in its path (ADR 0017). Each is used once.
        self._ready: list[Path] = []
        self._ready_size = ready
        self._refilling = False
        self._used: list[tuple[Path, Path | None]] = []  # used ready folder → where it goes
        self.stream_tokens = False  # the control plane takes `agent_tokens` (set on register)

    async def open(self) -> None:
        """Create the workspaces folder and the folders kept ready."""
        root = await asyncio.to_thread(_workspace_root, self.workspaces)
        self._workspace_root = root
        try:
            self._ready = await asyncio.to_thread(reset_ready, root, self._ready_size)
        except OSError:  # attempts make their folders as they start instead
            log.warning("worker.ready_workspaces_failed", exc_info=True)

    async def outcome(self, attempt: Attempt) -> TaskResult:
        """Run `attempt` to its result; never raises but for the worker's own cancellation.

        `task_accepted` goes out only if the attempt is still running after ACCEPT_AFTER
        seconds: a result says by itself that the attempt started, and attempts that end
        sooner (lookups, no-ops, refusals) then cost one message instead of two (ADR 0013).
        """
        aid = attempt.message.attempt_id
        if self.tracing is not None:
            attempt.trace = self.tracing.attempt(attempt.message)
        accept = asyncio.get_running_loop().call_later(ACCEPT_AFTER, self._accept, aid)
        try:
            result = await self._outcome(attempt)
        finally:
            accept.cancel()
        if attempt.trace is not None:
            attempt.trace.end(result)
        return result

    def _accept(self, attempt_id: uuid.UUID) -> None:
        self._send_soon(TaskAccepted(attempt_id=attempt_id))

    def _send_soon(self, message: BaseModel) -> None:
        task = asyncio.get_running_loop().create_task(self._send(message))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _reporter(self, attempt_id: uuid.UUID) -> Callable[[Usage], None]:
        """What a tool calls with its attempt's spending so far (a task with a budget)."""
        return lambda usage: self._send_soon(AttemptUsage(attempt_id=attempt_id, usage=usage))

    async def _outcome(self, attempt: Attempt) -> TaskResult:
        try:
            result = await self._execute(attempt)
        except asyncio.CancelledError:
            if not _absorb_cancel(attempt):
                raise
            return _cancelled(attempt)
        except Exception as exc:  # a bug here must fail one attempt, not the worker
            log.exception("worker.attempt_crashed", attempt_id=str(attempt.message.attempt_id))
            return failed(attempt, f"The worker failed while running the attempt: {exc}")
        if _absorb_cancel(attempt):  # the tool swallowed the cancellation
            return _cancelled(attempt)
        return result

    async def _execute(self, attempt: Attempt) -> TaskResult:
        msg = attempt.message
        tool = self.tools.get(msg.tool)
        if tool is None:
            have = ", ".join(sorted(self.tools)) or "none"
            return failed(attempt, f"This worker has no tool {msg.tool!r}; it has: {have}.")
        # An attempt that brings no files takes a folder made ahead of need, or makes its own
        # right here (one or two mkdir calls); one with upstream files, or a folder left by an
        # earlier run, goes to a thread.
        ready = self._take_ready(msg)
        bare = ready or (prepare_bare_workspace(self._workspace_root, msg)
                         if self._workspace_root is not None else None)
        skipped: list[RejectedFile] = []
        before: dict[str, str] = {}
        if bare is not None:  # nothing to write into it, so nothing to fingerprint either
            workspace = bare
        else:
            try:
                workspace, skipped, before = await self._preparer.run(msg)
            except OSError as exc:
                return failed(attempt, f"Could not prepare the workspace: {exc}")
        empty: bool | None = None
        started: list[bool] = []  # marked if the attempt starts a process
        token = process.spawned.set(started)
        try:
            stream = LogStream()
            for file in skipped:
                stream.write(f"[shoal] upstream file {file.path} skipped: {file.reason}")
            tokens = TokenStream() if self.stream_tokens else None
            run = _tool_run(msg, workspace, stream, attempt.trace, tokens)
            if msg.budget is not None:  # the control plane counts it as it goes
                run = dataclasses.replace(run, spent=self._reporter(msg.attempt_id))
            status, outcome = await self._run_tool(tool, run, stream, tokens)
            if msg.output_file is not None and status == "succeeded" and outcome.output:
                await asyncio.to_thread(_save_output, workspace, msg.output_file, outcome.output,
                                        before.get(msg.output_file))
            empty = not before and is_bare(workspace)  # the tool wrote nothing
            files, rejected = await self._collect(workspace, before, outcome, empty=empty)
        finally:
            process.spawned.reset(token)
            if ready is not None:
                self._release(ready, msg, empty=is_bare(ready) if empty is None else empty,
                              spawned=bool(started))
        return _result(attempt, status, outcome=outcome, files=files, rejected=rejected)

    def _take_ready(self, msg: ExecuteTask) -> Path | None:
        """A ready folder for an attempt that brings no files, if one is left."""
        if not self._ready or any(upstream.files for upstream in msg.upstream):
            return None
        return self._ready.pop()

    def _release(self, folder: Path, msg: ExecuteTask, *, empty: bool, spawned: bool) -> None:
        """A ready folder the attempt left empty, without starting any process, is ready again
        at once: nothing of the attempt can still write into it. Any other is used once: after
        the result has gone out (`finished`) it is removed if empty, or moves to the
        attempt's own place."""
        if empty and not spawned and len(self._ready) < self._ready_size:
            self._ready.append(folder)
            return
        target = None if empty or self._workspace_root is None else workspace_path(
            self._workspace_root, msg)
        self._used.append((folder, target))

    async def _run_tool(
        self, tool: Tool, run: ToolRun, stream: LogStream, tokens: TokenStream | None = None,
    ) -> tuple[ResultStatus, ToolOutcome]:
        """Run the tool under its time limit while its log lines (and streamed text) flow
        out beside it."""
        async with asyncio.TaskGroup() as group:
            stream.start_with(lambda: group.create_task(self._forward_logs(run.attempt_id,
                                                                           stream)))
            if tokens is not None:
                tokens.start_with(lambda: group.create_task(self._forward_tokens(
                    run.attempt_id, tokens)))
            try:
                return await _call_tool(tool, run)
            finally:
                stream.close()
                if tokens is not None:
                    tokens.close()

    async def _forward_logs(self, attempt_id: uuid.UUID, stream: LogStream) -> None:
        async for text in stream.batches():
            await self._send(AgentLog(attempt_id=attempt_id, message=storable_text(text)))

    async def _forward_tokens(self, attempt_id: uuid.UUID, tokens: TokenStream) -> None:
        async for text in tokens.chunks():
            if clean := storable_text(text):
                await self._send(AgentTokens(attempt_id=attempt_id, text=clean))

    async def _collect(
        self, workspace: Path, before: dict[str, str], outcome: ToolOutcome, *, empty: bool
    ) -> tuple[list[FilePayload], list[RejectedFile]]:
        if empty:  # the tool wrote nothing: no thread hop
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

    async def finished(self, running: Iterable[Attempt]) -> None:
        """After an attempt's result went out: when PUT_AWAY_EVERY used ready folders have
        gathered, put them away; make ready folders when fewer than half are left; and every
        PRUNE_EVERY attempts, but not within PRUNE_SECONDS of the last time, prune old
        workspaces but those of the tasks of the attempts still `running` (read only then).
        All of it in one thread job, and none most of the time: a hop per attempt costs the
        worker more than the folders themselves. A prune runs Python in its thread, and so
        takes the GIL whenever the event loop's thread lets it go for a system call; ten of
        them in a burst of a hundred short attempts made each attempt cost the worker half as
        much again (issue 37's thirty-third round)."""
        self._finished += 1
        missing = self._ready_size - len(self._ready)
        refill = (missing if missing > self._ready_size // 2 and not self._refilling
                  and self._workspace_root is not None else 0)
        prune = self._finished % PRUNE_EVERY == 0 and time.monotonic() >= self._next_prune
        if prune:
            self._next_prune = time.monotonic() + PRUNE_SECONDS
        if not (refill or prune or len(self._used) >= PUT_AWAY_EVERY):
            return
        used, self._used = self._used, []
        self._refilling = self._refilling or refill > 0
        # The running attempts' tasks, each named once: by the ids' numbers first (a UUID's
        # hash and text are Python calls, and a burst runs hundreds of attempts of one task).
        protect = ({str(uuid.UUID(int=n)) for n in {a.message.task_id.int for a in running}}
                   if prune else None)
        try:
            made = await asyncio.to_thread(self._tidy, used, refill, protect)
        except OSError:
            log.warning("worker.workspace_upkeep_failed", exc_info=True)
            made = []
        finally:
            self._refilling = self._refilling and not refill
        self._ready.extend(made)
        while len(self._ready) > self._ready_size:  # folders came back while more were made
            self._used.append((self._ready.pop(), None))

    def _tidy(
        self, used: list[tuple[Path, Path | None]], refill: int, protect: set[str] | None
    ) -> list[Path]:
        """`finished`'s file work, in one thread job; returns the folders made ready."""
        file_away(used)
        if protect is not None:
            try:
                prune_workspaces(self.workspaces, keep=KEEP_WORKSPACES, protect=protect)
            except OSError:
                log.warning("worker.prune_failed", exc_info=True)
        if refill and self._workspace_root is not None:
            return make_ready(self._workspace_root, refill)
        return []


async def _call_tool(tool: Tool, run: ToolRun) -> tuple[ResultStatus, ToolOutcome]:
    """Run `tool` under the attempt's time limit; its errors become a failed outcome.

    The limit works as `asyncio.timeout` does: a timer of the loop cancels this task, and the
    cancellation it caused (and only that one) becomes the `timed_out` result. Without the
    scope object, its state machine and its rescheduling: some 3 µs an attempt on uvloop
    (4 against 1), a twentieth of what the worker spends on a short attempt."""
    task = asyncio.current_task()
    assert task is not None  # a coroutine run by the loop
    expired: list[bool] = []
    cancelling = task.cancelling()
    timer = asyncio.get_running_loop().call_later(run.timeout, _expire, task, expired)
    try:
        outcome = await tool.run(run)
    except asyncio.CancelledError:
        # Another cancellation as well (the control plane's, the worker stopping) wins.
        if not expired or task.uncancel() > cancelling:
            raise
        limit = f"The attempt ran past its time limit of {run.timeout:g} seconds and was stopped."
        return "timed_out", ToolOutcome(status="failed", error=limit)
    except Exception as exc:
        if expired:  # the tool turned the cancellation into an error of its own
            task.uncancel()
        log.warning("worker.tool_failed", attempt_id=str(run.attempt_id), exc_info=True)
        return "failed", ToolOutcome(status="failed", error=describe(exc))
    finally:
        timer.cancel()
    if expired:  # the tool swallowed the cancellation and returned: its outcome stands
        task.uncancel()
    return outcome.status, outcome


def _expire(task: asyncio.Task[Any], expired: list[bool]) -> None:
    """The time limit has passed: stop the attempt's task (`_call_tool`)."""
    expired.append(True)
    task.cancel()


def _tool_run(msg: ExecuteTask, workspace: Path, stream: LogStream,
              trace: AttemptTrace | None, tokens: TokenStream | None = None) -> ToolRun:
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
        trace=trace,
        mcp_servers=tuple(msg.mcp_servers),
        stream=tokens.write if tokens is not None else None,
        budget=msg.budget,
    )


def _save_output(workspace: Path, name: str, text: str, upstream: str | None) -> None:
    """A workflow's final answer as a file of the workspace, unless the agent wrote one: a
    file of that name that came from upstream (fingerprint `upstream`) and that the agent left
    as it was is replaced (a step that revises an earlier step's report)."""
    target = workspace / name  # `name` is one plain file name (the protocol's pattern)
    if target.exists() and (upstream is None or snapshot_one(target) != upstream):
        return
    target.write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")


def _result(
    attempt: Attempt,
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
        output=storable_text(outcome.output),
        files=files or [],
        rejected_files=rejected or [],
        usage=outcome.usage,
        error=storable_text(outcome.error) if outcome.error else None,
        duration_seconds=time.monotonic() - attempt.started,
        denials=[d.as_dict() for d in outcome.denials],
    )


def failed(attempt: Attempt, error: str) -> TaskResult:
    return _result(attempt, "failed", outcome=ToolOutcome(status="failed", error=error))


def declined(attempt: Attempt, reason: str) -> TaskResult:
    """The answer to an attempt this worker has no room for (or is leaving): it never ran."""
    return _result(attempt, "declined", outcome=ToolOutcome(status="failed", error=reason))


def _cancelled(attempt: Attempt) -> TaskResult:
    error = f"Cancelled: {attempt.cancel_reason}"
    return _result(attempt, "cancelled", outcome=ToolOutcome(status="failed", error=error))


def _absorb_cancel(attempt: Attempt) -> bool:
    """True if the pending cancellation is the one this attempt asked for (then clear it)."""
    if attempt.cancel_reason is None:
        return False
    task = asyncio.current_task()
    # Anything left after uncancel() is a second cancellation (e.g. the worker is dying).
    return task is None or task.uncancel() == 0


def describe(exc: BaseException) -> str:
    if isinstance(exc, ShoalError):
        return exc.message
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
