"""The one process runner tools and evaluators share.

`run_command` starts a child in its own session, streams its output line by line, and makes
sure nothing it started outlives it. On a time-out or a cancellation it runs the cancel ladder
on the child's process group — SIGINT, a grace period, SIGTERM, another grace period, SIGKILL —
and then kills any descendant that left the group. A cancellation is re-raised after cleanup.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import contextvars
import os
import shlex
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped, unused-ignore]  # stubs: types-psutil

from shoal.errors import ToolError

# Set by the executor around an attempt (a list, so the tasks it starts, which copy the
# context, share it): marked when the attempt starts a process, whose leftovers could write
# into its folder after it ended (ADR 0017).
spawned: contextvars.ContextVar[list[bool] | None] = contextvars.ContextVar(
    "shoal_spawned", default=None)

_READ_SIZE = 65_536
_MAX_LINE = 16_384  # a line longer than this is handed on in pieces
_POLL = 0.02  # how often the ladder looks whether the processes are gone
_DRAIN_TIMEOUT = 2.0  # how long to wait for the pipes to close once every process is gone


@dataclass(frozen=True, slots=True)
class CommandResult:
    """How a command ended. `exit_code` is None when it timed out; negative for a signal."""

    exit_code: int | None
    stdout: str
    stderr: str
    timed_out: bool
    duration: float


class _Capture:
    """Keeps the last `limit` characters of one stream and hands complete lines on."""

    def __init__(self, limit: int, on_line: Callable[[str], None] | None,
                 max_line: int = _MAX_LINE) -> None:
        self._limit = limit
        self._on_line = on_line
        self._max_line = max_line
        self._chunks: list[str] = []
        self._size = 0
        self._cut = 0
        self._partial = ""
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, data: bytes, *, final: bool = False) -> None:
        text = self._decoder.decode(data, final=final)
        self._keep(text)
        if self._on_line is None:
            return
        pending = self._partial + text
        lines = pending.split("\n")
        self._partial = lines.pop()
        if final and self._partial:
            lines.append(self._partial)
            self._partial = ""
        while len(self._partial) > self._max_line:
            lines.append(self._partial[:self._max_line])
            self._partial = self._partial[self._max_line:]
        for line in lines:
            self._on_line(line.removesuffix("\r"))

    def _keep(self, text: str) -> None:
        self._chunks.append(text)
        self._size += len(text)
        if self._size > 2 * self._limit:
            joined = "".join(self._chunks)
            self._cut += len(joined) - self._limit
            self._chunks = [joined[-self._limit :]] if self._limit else []
            self._size = min(len(joined), self._limit)

    def text(self) -> str:
        joined = "".join(self._chunks)
        cut = self._cut + max(0, len(joined) - self._limit)
        if cut == 0:
            return joined
        kept = joined[-self._limit :] if self._limit else ""
        return f"[… {cut} earlier characters cut …]\n{kept}"


async def _pump(stream: asyncio.StreamReader | None, capture: _Capture) -> None:
    if stream is None:
        return
    while data := await stream.read(_READ_SIZE):
        capture.feed(data)
    capture.feed(b"", final=True)


async def run_command(
    argv: Sequence[str] | str,
    *,
    cwd: Path,
    timeout: float,  # noqa: ASYNC109 -- the child's limit, enforced here with asyncio.timeout
    env: Mapping[str, str] | None = None,
    on_line: Callable[[str], None] | None = None,
    shell: bool = False,
    max_output: int = 200_000,
    interrupt_grace: float = 2.0,
    terminate_grace: float = 2.0,
    on_start: Callable[[asyncio.StreamWriter], None] | None = None,
    interrupt: Callable[[], Awaitable[None]] | None = None,
    max_line: int = _MAX_LINE,
) -> CommandResult:
    """Run a command in `cwd` for at most `timeout` seconds and return how it ended.

    `env`, when given, is the child's whole environment (as in `subprocess`). Output lines of
    both streams go to `on_line` as they arrive; each stream keeps its last `max_output`
    characters. Raises `ToolError` if the command cannot be started.

    With `on_start`, the child's stdin is a pipe handed to `on_start` (for tools that take
    requests on stdin); otherwise stdin is /dev/null. `interrupt`, when given, is the tool's
    own protocol interrupt: the ladder awaits it first and gives the child `interrupt_grace`
    seconds to stop before it sends any signal. A line longer than `max_line` characters
    reaches `on_line` in pieces (raise it for JSONL output whose events can be large).
    """
    started = time.monotonic()
    child = await _start(argv, cwd=cwd, env=env, shell=shell, stdin=on_start is not None)
    proc = child.process
    if on_start is not None and proc.stdin is not None:
        on_start(proc.stdin)
    out, err = _Capture(max_output, on_line, max_line), _Capture(max_output, on_line, max_line)
    timed_out = False
    async with asyncio.TaskGroup() as tg:
        readers = [tg.create_task(_pump(proc.stdout, out)), tg.create_task(_pump(proc.stderr, err))]
        try:
            async with asyncio.timeout(timeout):
                await child.exited.wait()
        except TimeoutError:
            timed_out = True
        finally:
            await _stop_safely(child, interrupt_grace=interrupt_grace,
                               terminate_grace=terminate_grace, interrupt=interrupt)
            await asyncio.wait(readers, timeout=_DRAIN_TIMEOUT)
            for reader in readers:
                reader.cancel()
    return CommandResult(
        exit_code=None if timed_out else proc.returncode,
        stdout=out.text(),
        stderr=err.text(),
        timed_out=timed_out,
        duration=time.monotonic() - started,
    )


class _ExitAwareProtocol(asyncio.subprocess.SubprocessStreamProtocol):
    """asyncio's own subprocess protocol, plus an event set when the child exits.

    `Process.wait()` also waits for the pipes to close, which a leftover grandchild can hold
    open forever; the ladder needs to know when the child itself is gone.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(limit=_READ_SIZE, loop=loop)
        self.exited = asyncio.Event()

    def process_exited(self) -> None:
        super().process_exited()
        self.exited.set()


@dataclass(frozen=True, slots=True)
class _Child:
    process: asyncio.subprocess.Process
    exited: asyncio.Event


async def _start(
    argv: Sequence[str] | str, *, cwd: Path, env: Mapping[str, str] | None, shell: bool,
    stdin: bool = False,
) -> _Child:
    mark = spawned.get()
    if mark is not None:
        mark.append(True)
    loop = asyncio.get_running_loop()
    protocol = _ExitAwareProtocol(loop)
    options: dict[str, Any] = {"cwd": cwd, "env": dict(env) if env is not None else None,
                               "start_new_session": True,
                               "stdin": subprocess.PIPE if stdin else subprocess.DEVNULL,
                               "stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
    try:
        if shell:
            command = argv if isinstance(argv, str) else shlex.join(argv)
            transport, _ = await loop.subprocess_shell(lambda: protocol, command, **options)
        else:
            args = shlex.split(argv) if isinstance(argv, str) else list(argv)
            if not args:
                raise ToolError("No command given to run. Pass a program and its arguments.")
            transport, _ = await loop.subprocess_exec(lambda: protocol, *args, **options)
    except FileNotFoundError as exc:
        missing = exc.filename if exc.filename is not None else argv
        raise ToolError(
            f"Cannot run {argv!r}: {missing!r} was not found. Install it, put it on PATH, "
            f"or check that the folder {str(cwd)!r} exists.",
            details={"argv": str(argv), "cwd": str(cwd)},
        ) from exc
    except OSError as exc:
        raise ToolError(
            f"Cannot run {argv!r} in {str(cwd)!r}: {exc.strerror or exc}. Check that the "
            "program is executable and the folder is readable.",
            details={"argv": str(argv), "cwd": str(cwd)},
        ) from exc
    return _Child(asyncio.subprocess.Process(transport, protocol, loop), protocol.exited)


async def _stop_safely(
    child: _Child, *, interrupt_grace: float, terminate_grace: float,
    interrupt: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Run the cancel ladder; if this cleanup is itself cancelled, kill everything at once."""
    proc = child.process
    tracked: dict[int, psutil.Process] = {}
    try:
        if interrupt is not None and proc.returncode is None:
            _track(proc.pid, tracked)
            with contextlib.suppress(Exception):  # a broken pipe: go on to the signals
                async with asyncio.timeout(interrupt_grace):
                    await interrupt()
            await _wait_gone(proc, tracked, interrupt_grace)
        await _stop_tree(child, tracked, interrupt_grace=interrupt_grace,
                         terminate_grace=terminate_grace)
    except asyncio.CancelledError:
        _kill_now(proc.pid, tracked)
        raise


async def _stop_tree(
    child: _Child,
    tracked: dict[int, psutil.Process],
    *,
    interrupt_grace: float,
    terminate_grace: float,
) -> None:
    """SIGINT → SIGTERM → SIGKILL to the process group, then sweep leftover descendants."""
    proc = child.process
    pgid = proc.pid  # start_new_session makes the child the leader of its own group
    for sig, grace in ((signal.SIGINT, interrupt_grace), (signal.SIGTERM, terminate_grace)):
        _track(proc.pid, tracked)
        if not _any_alive(proc, tracked):
            return
        _signal_group(pgid, sig)
        await _wait_gone(proc, tracked, grace)
    _kill_now(pgid, tracked)
    await child.exited.wait()
    await _wait_gone(proc, tracked, terminate_grace)


def _track(pgid: int, tracked: dict[int, psutil.Process]) -> None:
    """Remember the leader's descendants and every member of its group, by pid."""
    found: list[psutil.Process] = []
    with contextlib.suppress(psutil.Error):
        found = psutil.Process(pgid).children(recursive=True)
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        candidates: list[psutil.Process] = []  # the group is empty: no need to scan
    else:
        candidates = list(psutil.process_iter())
    for candidate in candidates:
        try:
            if candidate.pid != pgid and os.getpgid(candidate.pid) == pgid:
                found.append(candidate)
        except (OSError, psutil.Error):
            continue
    for child in found:
        tracked.setdefault(child.pid, child)


def _alive(process: psutil.Process) -> bool:
    try:
        return bool(process.is_running() and process.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def _any_alive(proc: asyncio.subprocess.Process, tracked: dict[int, psutil.Process]) -> bool:
    return proc.returncode is None or any(_alive(p) for p in tracked.values())


async def _wait_gone(
    proc: asyncio.subprocess.Process, tracked: dict[int, psutil.Process], grace: float
) -> None:
    deadline = time.monotonic() + grace
    # Other processes' deaths raise no event here, so this polls.
    while _any_alive(proc, tracked) and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(_POLL)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # the group is empty
        os.killpg(pgid, sig)


def _kill_now(pgid: int, tracked: dict[int, psutil.Process]) -> None:
    _track(pgid, tracked)
    _signal_group(pgid, signal.SIGKILL)
    for process in tracked.values():
        try:
            process.kill()  # psutil checks the pid was not reused before signalling
        except psutil.Error:
            continue
