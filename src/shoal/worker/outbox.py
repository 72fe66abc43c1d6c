"""The outbox: task results kept on disk until the control plane acknowledges them (DESIGN §3).

A result is written here as it is sent (beside the send, not before it: ADR 0013), one JSON
file per attempt, atomically (temporary file, fsync, rename, fsync of the folder), so a worker
killed at any moment either has the whole result on disk or none of it. A restarted worker
loads `pending()` and re-sends it; an `ack` removes the file.

Saves are group-committed (ADR 0011): the saves that arrive while one batch is on disk wait for
the next, and a batch is written by one thread job — every file written, then each fsync'd and
renamed, and the folder fsync'd once — instead of a thread hop and a folder fsync per result.
`save()` still returns only when its own result is durable. Removals (after an `ack`) are
gathered for a moment and done in one thread job too.
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
from shoal.worker.batching import Batcher

log = structlog.get_logger()

_SUFFIX = ".json"
_Item = tuple[TaskResult, str | None]  # a result, and its JSON when the caller has it
_OPEN_FILES = 64  # temporary files a batch keeps open at once


class Outbox:
    """A folder of unacknowledged `TaskResult`s, one file per attempt."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._saves: Batcher[_Item, None] = Batcher(self._save_all)
        # Nobody waits for a removal: gather them for a while, then unlink in one thread job
        # (an unlink on the event loop can stall it for milliseconds behind a journal commit).
        self._removes: Batcher[uuid.UUID, None] = Batcher(self._remove_all, delay=0.05)

    async def save(self, result: TaskResult, encoded: str | None = None) -> None:
        """Write `result` durably (as `encoded`, its JSON, when the caller has it already);
        replaces an earlier result of the same attempt."""
        await self._saves.run((result, encoded))

    async def remove(self, attempt_id: uuid.UUID) -> None:
        """Forget the result of `attempt_id` (the control plane has decided on it).

        The unlink is not made durable: a result that comes back after a crash is re-sent
        and refused.
        """
        await self._removes.run(attempt_id)

    async def pending(self) -> list[TaskResult]:
        """Every result still waiting for an ack, oldest write first."""
        return await asyncio.to_thread(self._read_all)

    def _path(self, attempt_id: uuid.UUID) -> Path:
        return self.directory / f"{attempt_id}{_SUFFIX}"

    def _save_all(self, items: list[_Item]) -> list[Exception | None]:
        failed = self._write_all({r.attempt_id: (r, e) for r, e in items})  # the last one wins
        return [failed.get(r.attempt_id) for r, _ in items]

    def _remove_all(self, attempt_ids: list[uuid.UUID]) -> list[Exception | None]:
        outcomes: list[Exception | None] = []
        for attempt_id in attempt_ids:
            try:
                self._path(attempt_id).unlink(missing_ok=True)
            except OSError as exc:
                outcomes.append(exc)
            else:
                outcomes.append(None)
        return outcomes

    def _write_all(
        self, results: dict[uuid.UUID, _Item]
    ) -> dict[uuid.UUID, Exception]:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            return dict.fromkeys(results, exc)
        failed: dict[uuid.UUID, Exception] = {}
        written: list[tuple[uuid.UUID, Path, Path]] = []
        for chunk in _chunks(list(results.values()), _OPEN_FILES):
            handles = []
            for result, encoded in chunk:  # write all, then fsync: one journal commit for most
                target = self._path(result.attempt_id)
                tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
                try:
                    handle = tmp.open("wb")
                except OSError as exc:
                    failed[result.attempt_id] = exc
                    continue
                handles.append((result.attempt_id, tmp, target, handle))
                try:
                    handle.write((encoded or result.model_dump_json()).encode())
                    handle.flush()
                except OSError as exc:
                    failed[result.attempt_id] = exc
            for attempt_id, tmp, target, handle in handles:
                try:
                    with handle:
                        if attempt_id not in failed:
                            os.fsync(handle.fileno())
                except OSError as exc:
                    failed[attempt_id] = exc
                if attempt_id in failed:
                    with contextlib.suppress(OSError):
                        tmp.unlink(missing_ok=True)
                else:
                    written.append((attempt_id, tmp, target))
        for attempt_id, tmp, target in written:
            try:
                os.replace(tmp, target)
            except OSError as exc:
                failed[attempt_id] = exc
        _fsync_directory(self.directory)
        return failed

    def _read_all(self) -> list[TaskResult]:
        if not self.directory.is_dir():
            return []
        files = [p for p in self.directory.iterdir() if _is_result_file(p)]
        files.sort(key=lambda p: (p.stat().st_mtime_ns, p.name))
        results = (_read(p) for p in files)
        return [r for r in results if r is not None]


def _chunks(items: list[_Item], size: int) -> list[list[_Item]]:
    return [items[i:i + size] for i in range(0, len(items), size)]


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
