"""The outbox: task results kept on disk until the control plane acknowledges them (DESIGN §3).

A result is written here *before* it is sent, one JSON file per attempt, atomically (temporary
file, fsync, rename, fsync of the folder), so a worker killed at any moment either has the whole
result on disk or none of it. After a reconnect the worker re-sends `pending()`; an `ack`
removes the file.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from pathlib import Path

import structlog
from pydantic import ValidationError

from shoal.protocol import TaskResult

log = structlog.get_logger()

_SUFFIX = ".json"


class Outbox:
    """A folder of unacknowledged `TaskResult`s, one file per attempt."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    async def save(self, result: TaskResult) -> None:
        """Write `result` durably; replaces an earlier result of the same attempt."""
        await asyncio.to_thread(self._write, result)

    async def remove(self, attempt_id: uuid.UUID) -> None:
        """Forget the result of `attempt_id` (the control plane has decided on it)."""
        await asyncio.to_thread(self._path(attempt_id).unlink, missing_ok=True)

    async def pending(self) -> list[TaskResult]:
        """Every result still waiting for an ack, oldest write first."""
        return await asyncio.to_thread(self._read_all)

    def _path(self, attempt_id: uuid.UUID) -> Path:
        return self.directory / f"{attempt_id}{_SUFFIX}"

    def _write(self, result: TaskResult) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        target = self._path(result.attempt_id)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        with tmp.open("wb") as handle:
            handle.write(result.model_dump_json().encode())
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
        _fsync_directory(self.directory)

    def _read_all(self) -> list[TaskResult]:
        if not self.directory.is_dir():
            return []
        files = [p for p in self.directory.iterdir() if _is_result_file(p)]
        files.sort(key=lambda p: (p.stat().st_mtime_ns, p.name))
        results = (_read(p) for p in files)
        return [r for r in results if r is not None]


def _is_result_file(path: Path) -> bool:
    return path.suffix == _SUFFIX and not path.name.startswith(".") and path.is_file()


def _read(path: Path) -> TaskResult | None:
    """Load one buffered result; set aside a file that cannot be parsed instead of failing."""
    try:
        return TaskResult.model_validate_json(path.read_bytes())
    except (ValidationError, ValueError):
        # A file we cannot read would otherwise block every reconnect; keep it for a person.
        aside = path.with_suffix(".corrupt")
        os.replace(path, aside)
        log.exception("worker.outbox_corrupt_file", path=str(aside))
        return None


def _fsync_directory(directory: Path) -> None:
    """Make a rename in `directory` durable (POSIX); a no-op where folders cannot be opened."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)
