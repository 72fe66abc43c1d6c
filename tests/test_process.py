"""The process runner: output, exit codes, time limits and the cancel ladder."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

import psutil  # type: ignore[import-untyped, unused-ignore]
import pytest

from shoal.errors import ToolError
from shoal.process import CommandResult, run_command

# Each script prints the pids of the processes it leaves behind, one per line, then waits.
SLEEP = "echo $$; exec sleep 100"
GRANDCHILDREN = "sleep 100 & echo $!; sleep 100 & echo $!; echo $$; wait"
STUBBORN = (
    f"{sys.executable} -c 'import os, signal, time; "
    "signal.signal(signal.SIGINT, signal.SIG_IGN); signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "print(os.getpid(), flush=True); time.sleep(100)'"
)
ESCAPER = (
    f"{sys.executable} -c 'import os, time; os.setsid(); print(os.getpid(), flush=True); "
    "time.sleep(100)' & echo $$; wait"
)


async def run_shell(
    script: str, cwd: Path, *, limit: float, lines: list[str]
) -> CommandResult:
    """Run `script` in a shell with a short cancel ladder, collecting its lines."""
    return await run_command(script, cwd=cwd, timeout=limit, shell=True, on_line=lines.append,
                             interrupt_grace=0.3, terminate_grace=0.3)


def gone(pid: int) -> bool:
    """True when `pid` no longer runs (a zombie waiting for its reaper counts as gone)."""
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


def pids(lines: list[str]) -> list[int]:
    return [int(line) for line in lines if line.strip().isdigit()]


async def wait_for_pids(lines: list[str], count: int) -> None:
    deadline = time.monotonic() + 10
    while len(pids(lines)) < count:
        assert time.monotonic() < deadline, f"the command printed only {lines!r}"
        await asyncio.sleep(0.01)


async def test_captures_output_and_exit_code(tmp_path: Path) -> None:
    """Both streams are captured, lines are streamed, and the exit code is returned."""
    lines: list[str] = []
    script = "import sys; print('hello'); print('oops', file=sys.stderr); sys.exit(3)"
    result = await run_command([sys.executable, "-c", script], cwd=tmp_path, timeout=30,
                               on_line=lines.append)
    assert result.exit_code == 3
    assert result.stdout == "hello\n"
    assert result.stderr == "oops\n"
    assert sorted(lines) == ["hello", "oops"]
    assert not result.timed_out


async def test_shell_runs_in_cwd_with_env(tmp_path: Path) -> None:
    """A shell command runs in `cwd` with exactly the environment given."""
    real_cwd = await asyncio.to_thread(os.path.realpath, tmp_path)
    result = await run_command("pwd -P; echo $SHOAL_X", cwd=tmp_path, timeout=30, shell=True,
                               env={"SHOAL_X": "42", "PATH": "/usr/bin:/bin"})
    assert result.exit_code == 0
    assert result.stdout.split() == [real_cwd, "42"]


async def test_long_output_keeps_the_tail(tmp_path: Path) -> None:
    """Output past `max_output` is cut from the front and the cut is announced."""
    script = "print('a' * 5000); print('end')"
    result = await run_command([sys.executable, "-c", script], cwd=tmp_path, timeout=30,
                               max_output=100)
    assert result.stdout.startswith("[… ")
    assert result.stdout.endswith("a" * 50 + "\nend\n")
    assert len(result.stdout) < 200


async def test_missing_program_raises_tool_error(tmp_path: Path) -> None:
    """A program that does not exist is a ToolError that says what to do."""
    with pytest.raises(ToolError, match=r"not found\. Install it"):
        await run_command(["shoal-no-such-program"], cwd=tmp_path, timeout=30)


async def test_timeout_kills_the_command(tmp_path: Path) -> None:
    """A command past its time limit is stopped and reported as timed out."""
    lines: list[str] = []
    result = await run_shell(SLEEP, tmp_path, limit=1.5, lines=lines)
    assert result.timed_out
    assert result.exit_code is None
    assert pids(lines)
    assert all(gone(pid) for pid in pids(lines))


async def test_timeout_kills_grandchildren(tmp_path: Path) -> None:
    """Background grandchildren of a timed-out shell do not survive it."""
    lines: list[str] = []
    result = await run_shell(GRANDCHILDREN, tmp_path, limit=1.5, lines=lines)
    assert result.timed_out
    assert len(pids(lines)) == 3
    assert all(gone(pid) for pid in pids(lines))


async def test_signal_ignoring_child_is_killed(tmp_path: Path) -> None:
    """A child that ignores SIGINT and SIGTERM still ends, by SIGKILL."""
    lines: list[str] = []
    result = await run_shell(STUBBORN, tmp_path, limit=1.5, lines=lines)
    assert result.timed_out
    assert pids(lines)
    assert all(gone(pid) for pid in pids(lines))


async def test_descendant_in_its_own_session_is_swept(tmp_path: Path) -> None:
    """A descendant that left the process group is found and killed too."""
    lines: list[str] = []
    result = await run_shell(ESCAPER, tmp_path, limit=1.5, lines=lines)
    assert result.timed_out
    assert len(pids(lines)) == 2
    assert all(gone(pid) for pid in pids(lines))


async def test_background_leftovers_are_stopped_after_exit(tmp_path: Path) -> None:
    """A command that exits but leaves a background process behind does not leak it."""
    lines: list[str] = []
    result = await run_shell("sleep 100 & echo $!", tmp_path, limit=30, lines=lines)
    assert result.exit_code == 0
    assert not result.timed_out
    assert pids(lines)
    assert all(gone(pid) for pid in pids(lines))


async def test_cancellation_kills_everything_and_propagates(tmp_path: Path) -> None:
    """Cancelling the runner stops the whole tree, then re-raises CancelledError."""
    lines: list[str] = []
    running = asyncio.create_task(run_shell(GRANDCHILDREN, tmp_path, limit=60, lines=lines))
    await wait_for_pids(lines, 3)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    assert all(gone(pid) for pid in pids(lines))
