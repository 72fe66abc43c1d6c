"""The outbox: task results kept on disk until the control plane acknowledges them (DESIGN §3).

One append-only log per worker (`results.log`, ADR 0016). A result is appended as a framed
record — kind, length, CRC-32, the attempt id, the result's JSON — beside its send (ADR 0013),
and the log is made durable with one `fdatasync`. An `ack` appends a small tombstone, not
synced: a result that comes back after a crash is re-sent and refused, as it always was. So a
result costs one write and one data sync instead of a file created, synced, renamed and
unlinked plus a folder sync (about a tenth of the CPU on ext4).

Saves are group-committed (ADR 0011): the saves that arrive while one batch is on disk form
the next, written with one `write` and one `fdatasync`; `save()` returns only when its own
result is durable. Tombstones are gathered for a moment and written together. When no result is
left the log is truncated to nothing; when superseded records pass a size limit and outweigh
the live ones, the live records are copied to a new log that replaces the old one atomically.

Opening the log (on the first use in a process) checks every record: a torn tail — a crash in
the middle of an append — is cut off, and anything after the first record that does not check
out is set aside in `results.log.corrupt` for a person instead of blocking every re-send.
Result files of the earlier one-file-per-attempt layout (`<attempt>.json`) are moved into the
log, so an upgraded worker still re-sends what its predecessor buffered.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import struct
import threading
import uuid
import zlib
from dataclasses import dataclass
from pathlib import Path

import structlog
from pydantic import ValidationError

from shoal.protocol import TaskResult
from shoal.worker.batching import Batcher

log = structlog.get_logger()

LOG_NAME = "results.log"
CORRUPT_NAME = "results.log.corrupt"
COMPACT_BYTES = 4 * 1024 * 1024  # superseded bytes past which the log is rewritten
RESTART_BYTES = 256 * 1024  # a log this long with nothing live in it is truncated

_SAVE, _REMOVE = 1, 2
_HEADER = struct.Struct("<BII")  # kind, body length, CRC-32 of kind byte + body
_ID_BYTES = 16  # every body starts with the attempt id
_FRAME = _HEADER.size + _ID_BYTES  # a record's bytes before its payload (a tombstone's all)
_MAX_BODY = 1 << 30  # a length past this is corruption, not a record
_LEGACY_SUFFIX = ".json"
# The data and the length of what was appended, not other metadata (fsync where an OS has no
# fdatasync, as macOS).
_datasync = getattr(os, "fdatasync", os.fsync)
_Item = tuple[TaskResult, str | None]  # a result, and its JSON when the caller has it


def _crc(kind: int, body: bytes) -> int:
    return zlib.crc32(body, zlib.crc32(bytes([kind])))


def _record(kind: int, attempt_id: uuid.UUID, payload: bytes = b"") -> bytes:
    """One framed record: header, then the attempt id, then `payload`."""
    body = attempt_id.bytes + payload
    return _HEADER.pack(kind, len(body), _crc(kind, body)) + body


@dataclass(slots=True)
class _Scan:
    """What reading a log found: live saves (attempt → offset and length of the JSON), where
    the last good record ends, and how many bytes are superseded."""

    live: dict[uuid.UUID, tuple[int, int]]
    end: int
    dead: int


def scan(data: bytes) -> _Scan:
    """Index the records in `data`, stopping at the first that does not check out."""
    live: dict[uuid.UUID, tuple[int, int]] = {}
    pos = dead = 0
    while pos + _HEADER.size <= len(data):
        kind, length, crc = _HEADER.unpack_from(data, pos)
        start, stop = pos + _HEADER.size, pos + _HEADER.size + length
        if (kind not in (_SAVE, _REMOVE) or not _ID_BYTES <= length <= _MAX_BODY
                or stop > len(data) or _crc(kind, data[start:stop]) != crc):
            break
        attempt_id = uuid.UUID(bytes=data[start:start + _ID_BYTES])
        earlier = live.pop(attempt_id, None)
        if earlier is not None:
            dead += earlier[1] + _FRAME
        if kind == _SAVE:
            live[attempt_id] = (start + _ID_BYTES, length - _ID_BYTES)
        else:
            dead += stop - pos
        pos = stop
    return _Scan(live, pos, dead)


def read_pending(directory: Path) -> list[TaskResult]:
    """The results a worker with this outbox folder would re-send, oldest write first, read
    without changing anything (what a restarted worker would find)."""
    try:
        data = (directory / LOG_NAME).read_bytes()
    except FileNotFoundError:
        return []
    found = scan(data)
    results = (_parse(data[o:o + n]) for o, n in found.live.values())
    return [r for r in results if r is not None]


def _parse(payload: bytes) -> TaskResult | None:
    try:
        return TaskResult.model_validate_json(payload)
    except (ValidationError, ValueError):
        return None


class Outbox:
    """Unacknowledged `TaskResult`s in one append-only log in `directory`."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.path = directory / LOG_NAME
        self._lock = threading.Lock()  # the log: one thread at a time writes or rewrites it
        self._fd: int | None = None
        self._size = 0  # where the last good record ends: the next append goes here
        self._dead = 0  # bytes of superseded records and tombstones
        self._live: dict[uuid.UUID, tuple[int, int]] = {}  # in write order
        self._saves: Batcher[_Item, None] = Batcher(self._save_all)
        # Nobody waits for a tombstone: gather them for a while, then write them together.
        self._removes: Batcher[uuid.UUID, None] = Batcher(self._remove_all, delay=0.05)

    async def save(self, result: TaskResult, encoded: str | None = None) -> None:
        """Append `result` durably (as `encoded`, its JSON, when the caller has it already);
        it replaces an earlier result of the same attempt."""
        await self._saves.run((result, encoded))

    async def remove(self, attempt_id: uuid.UUID) -> None:
        """Forget the result of `attempt_id` (the control plane has decided on it).

        The tombstone is not made durable: a result that comes back after a crash is re-sent
        and refused.
        """
        await self._removes.run(attempt_id)

    async def pending(self) -> list[TaskResult]:
        """Every result still waiting for an ack, oldest write first."""
        return await asyncio.to_thread(self._read_live)

    def close(self) -> None:
        """Close the log file (it is opened again on the next use)."""
        with self._lock:
            self._close()

    # ---- on the I/O thread, under the lock ---------------------------------------------------

    def _save_all(self, items: list[_Item]) -> list[Exception | None]:
        with self._lock:
            return self._write_saves(items)

    def _write_saves(self, items: list[_Item]) -> list[Exception | None]:
        """Append `items` and sync the log once (the lock is held)."""
        try:
            fd = self._open()
        except OSError as exc:
            return [exc] * len(items)
        before = self._size
        try:
            latest = {r.attempt_id: (r, e) for r, e in items}  # the last one wins
            chunks, offsets, at = [], {}, self._size
            for aid, (result, encoded) in latest.items():
                chunk = _record(_SAVE, aid, (encoded or result.model_dump_json()).encode())
                offsets[aid] = (at + _FRAME, len(chunk) - _FRAME)
                chunks.append(chunk)
                at += len(chunk)
            self._append(fd, b"".join(chunks))
            _datasync(fd)
        except OSError as exc:
            self._undo(before)
            return [exc] * len(items)
        for aid, where in offsets.items():
            earlier = self._live.pop(aid, None)
            if earlier is not None:
                self._dead += earlier[1] + _FRAME
            self._live[aid] = where
        return [None] * len(items)

    def _remove_all(self, attempt_ids: list[uuid.UUID]) -> list[Exception | None]:
        with self._lock:
            try:
                fd = self._open()
            except OSError as exc:
                return [exc] * len(attempt_ids)
            gone = [aid for aid in dict.fromkeys(attempt_ids) if aid in self._live]
            if not gone:
                return [None] * len(attempt_ids)
            before = self._size
            try:
                if len(gone) == len(self._live) and self._size >= RESTART_BYTES:
                    os.ftruncate(fd, 0)  # nothing left to keep: start the log afresh
                    self._size = self._dead = 0
                    self._live.clear()
                    return [None] * len(attempt_ids)
                self._append(fd, b"".join(_record(_REMOVE, aid) for aid in gone))
            except OSError as exc:
                self._undo(before)
                return [exc] * len(attempt_ids)
            for aid in gone:
                _, length = self._live.pop(aid)
                self._dead += length + 2 * _FRAME  # the save and its tombstone
            if self._dead > COMPACT_BYTES and self._dead > self._size // 2:
                try:
                    self._compact()
                except OSError:  # the old log is still whole; try again after more removals
                    log.warning("worker.outbox_compaction_failed", exc_info=True)
            return [None] * len(attempt_ids)

    def _read_live(self) -> list[TaskResult]:
        with self._lock:
            if self._fd is None and not self.path.exists() and not self._legacy_files():
                return []
            fd = self._open()
            out = []
            for offset, length in self._live.values():
                result = _parse(os.pread(fd, length, offset))
                if result is not None:
                    out.append(result)
            return out

    def _open(self) -> int:
        """The log's descriptor, opening (and checking) the log on first use."""
        if self._fd is not None:
            return self._fd
        self.directory.mkdir(parents=True, exist_ok=True)
        created = not self.path.exists()
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            if created:
                _fsync_directory(self.directory)  # the new log's name survives a crash
            self._load(fd)
            self._fd = fd
            self._import_legacy()
        except BaseException:
            os.close(fd)
            self._fd = None
            raise
        return fd

    def _load(self, fd: int) -> None:
        size = os.fstat(fd).st_size
        data = os.pread(fd, size, 0) if size else b""
        found = scan(data)
        bad = [aid for aid, (o, n) in found.live.items() if _parse(data[o:o + n]) is None]
        if found.end < size or bad:
            self._set_aside(data[found.end:], [data[o:o + n] for aid, (o, n)
                                               in found.live.items() if aid in bad])
        if found.end < size:
            os.ftruncate(fd, found.end)
            os.fsync(fd)
        self._live, self._size, self._dead = found.live, found.end, found.dead
        if bad:  # whole records of results this version cannot read: kept aside, not re-sent
            for aid in bad:
                _, length = found.live.pop(aid)
                self._dead += length + 2 * _FRAME  # the save and its tombstone
            self._append(fd, b"".join(_record(_REMOVE, aid) for aid in bad))

    def _set_aside(self, tail: bytes, unreadable: list[bytes]) -> None:
        aside = self.directory / CORRUPT_NAME
        with aside.open("ab") as handle:
            for payload in unreadable:
                handle.write(payload + b"\n")
            if tail:
                handle.write(tail)
        log.error("worker.outbox_corrupt_records", path=str(aside), unreadable=len(unreadable),
                  torn_bytes=len(tail))

    def _legacy_files(self) -> list[Path]:
        if not self.directory.is_dir():
            return []
        return sorted((p for p in self.directory.iterdir()
                       if p.suffix == _LEGACY_SUFFIX and not p.name.startswith(".")),
                      key=lambda p: (p.stat().st_mtime_ns, p.name))

    def _import_legacy(self) -> None:
        """Move results of the one-file-per-attempt layout into the log, oldest first."""
        files = self._legacy_files()
        if not files:
            return
        items: list[_Item] = []
        for path in files:
            result = _parse(path.read_bytes())
            if result is None:  # kept for a person, as the old layout did
                os.replace(path, path.with_suffix(".corrupt"))
                log.error("worker.outbox_corrupt_file", path=str(path.with_suffix(".corrupt")))
            else:
                items.append((result, None))
        failed = [e for e in self._write_saves(items) if e is not None]
        if failed:
            raise failed[0]
        for path in files:
            path.unlink(missing_ok=True)

    def _append(self, fd: int, blob: bytes) -> None:
        view = memoryview(blob)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        self._size += len(blob)

    def _undo(self, good: int) -> None:
        """After a failed append, cut the log back to its last good record (`good` bytes), or
        close it so that the next use reopens and checks it."""
        self._size = good
        if self._fd is None:
            return
        try:
            os.ftruncate(self._fd, good)
        except OSError:
            self._close()

    def _compact(self) -> None:
        """Copy the live records into a new log and put it in the old one's place."""
        assert self._fd is not None
        tmp = self.path.with_name(f".{LOG_NAME}.{os.getpid()}.tmp")
        live: dict[uuid.UUID, tuple[int, int]] = {}
        chunks, at = [], 0
        for aid, (offset, length) in self._live.items():
            chunk = _record(_SAVE, aid, os.pread(self._fd, length, offset))
            live[aid] = (at + _FRAME, length)
            chunks.append(chunk)
            at += len(chunk)
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o600)
        try:
            os.write(fd, b"".join(chunks))
            os.fsync(fd)
            os.replace(tmp, self.path)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
        _fsync_directory(self.directory)
        self._close()
        self._fd, self._live, self._size, self._dead = fd, live, at, 0

    def _close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None


def _fsync_directory(directory: Path) -> None:
    """Make a new name in `directory` durable (POSIX); a no-op where folders cannot be opened."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)
