"""Content-addressed file storage, the checks files pass on the way in, and zip export.

Every stored file is named by the SHA-256 of its bytes and lives at `root/objects/ab/cdef…`.
Writes go to a temporary file that is renamed into place, so an object is either complete or
absent — never half-written — and storing the same bytes twice is a no-op.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import shutil
import tempfile
import time
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from shoal.artifacts.paths import check_relative_path
from shoal.errors import InvalidInput, NotFound, UnsafePath

_SHA256 = re.compile(r"[0-9a-f]{64}")
# A fixed timestamp makes the same files always zip to the same bytes.
_ZIP_DATE = (1980, 1, 1, 0, 0, 0)


@dataclass(frozen=True, slots=True)
class ManifestEntry:
    """One file of a subtask's output: where it goes, how big it is, and its content address."""

    path: str
    size: int
    sha256: str


@dataclass(frozen=True, slots=True)
class RejectedFile:
    """A file that was refused, and why, in words a person can act on."""

    path: str
    reason: str


class ArtifactStore:
    """Files stored by content under one root directory."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._objects = root / "objects"
        self._scratch = root / "tmp"

    def path_of(self, sha256: str) -> Path:
        """Where the object `sha256` lives (whether or not it exists yet)."""
        if not _SHA256.fullmatch(sha256):
            raise NotFound(f"No artifact {sha256!r}: not a SHA-256 hex digest.")
        return self._objects / sha256[:2] / sha256[2:]

    async def put(self, data: bytes) -> str:
        """Store `data` and return its SHA-256 hex digest; storing it again changes nothing."""
        return await asyncio.to_thread(self._put, data)

    def scratch_file(self) -> Path:
        """A new empty file in the store's scratch folder (on the store's file system, so it
        can be moved in with `adopt`); the caller removes it if it is not adopted."""
        self._scratch.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=self._scratch, prefix="upload.")
        os.close(fd)
        return Path(name)

    def scratch_folder(self) -> Path:
        """A new empty folder in the store's scratch folder; the caller removes it."""
        self._scratch.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(dir=self._scratch, prefix="folder."))

    def adopt(self, path: Path, sha256: str) -> None:
        """Move the file at `path`, whose SHA-256 is `sha256`, into the store (blocking: run
        it in a thread); if the object is stored already, `path` is removed instead."""
        target = self.path_of(sha256)
        if target.is_file() and _touched(target):
            path.unlink(missing_ok=True)
            return
        target.parent.mkdir(parents=True, exist_ok=True)
        with path.open("rb") as file:
            os.fsync(file.fileno())
        os.replace(path, target)

    async def put_files(self, files: Sequence[tuple[str, bytes]]) -> list[ManifestEntry]:
        """Store already-validated `(path, data)` files and return their manifest, in order."""
        return [
            ManifestEntry(path=path, size=len(data), sha256=await self.put(data))
            for path, data in files
        ]

    async def read(self, sha256: str) -> bytes:
        """The bytes of object `sha256`; `NotFound` if it is not stored."""
        path = self.path_of(sha256)
        try:
            return await asyncio.to_thread(path.read_bytes)
        except FileNotFoundError:
            raise NotFound(f"No artifact {sha256}.") from None

    async def exists(self, sha256: str) -> bool:
        """Whether object `sha256` is stored."""
        try:
            path = self.path_of(sha256)
        except NotFound:
            return False
        return await asyncio.to_thread(path.is_file)

    def _put(self, data: bytes) -> str:
        sha256 = hashlib.sha256(data).hexdigest()
        target = self.path_of(sha256)
        if target.is_file() and _touched(target):
            return sha256
        target.parent.mkdir(parents=True, exist_ok=True)
        self._scratch.mkdir(parents=True, exist_ok=True)
        fd, temp = tempfile.mkstemp(dir=self._scratch, prefix=f"{sha256[:12]}.")
        try:
            with os.fdopen(fd, "wb") as file:
                file.write(data)
                file.flush()
                # The database will point at this object once we return; make it durable first.
                os.fsync(file.fileno())
            os.replace(temp, target)
        except BaseException:
            Path(temp).unlink(missing_ok=True)
            raise
        return sha256


def _touched(path: Path) -> bool:
    """Mark an object as stored just now (the sweeper leaves recent ones alone); False if
    the sweeper took it a moment ago, so it must be stored again."""
    try:
        os.utime(path)
    except FileNotFoundError:
        return False
    return True


def remove_unless_recent(store: ArtifactStore, sha256: str, *, grace: float) -> bool | None:
    """Remove object `sha256` unless it was stored (or stored again) within `grace` seconds:
    True when removed or already gone, None when kept as too recent.

    The object is first renamed aside and its time read there, so that a `put` of the same
    bytes racing with this either touched it before (it is kept) or finds it gone and stores
    it anew."""
    target = store.path_of(sha256)
    store._scratch.mkdir(parents=True, exist_ok=True)
    aside = store._scratch / f"sweep-{sha256}"
    try:
        os.replace(target, aside)
    except FileNotFoundError:
        return True
    if time.time() - aside.stat().st_mtime < grace:
        os.replace(aside, target)
        return None
    aside.unlink(missing_ok=True)
    return True


def validate_files(
    files: Sequence[tuple[str, bytes]],
    *,
    max_files: int,
    max_file_bytes: int,
    max_total_bytes: int,
) -> tuple[list[tuple[str, bytes]], list[RejectedFile]]:
    """Split `files` into accepted `(normalised path, data)` pairs and rejections with reasons.

    Files are taken in order; a file is refused — never renamed — for an unsafe path, a path
    already taken (or clashing with a folder of another file), its own size, or for going past
    the file-count or total-size limit.
    """
    accepted: list[tuple[str, bytes]] = []
    rejected: list[RejectedFile] = []
    taken: set[str] = set()
    folders: set[str] = set()
    total = 0
    for raw_path, data in files:
        try:
            path = check_relative_path(raw_path)
        except UnsafePath as exc:
            rejected.append(RejectedFile(raw_path, exc.message))
            continue
        reason = _clash_reason(path, taken, folders) or _limit_reason(
            len(data),
            len(accepted),
            total,
            max_files=max_files,
            max_file_bytes=max_file_bytes,
            max_total_bytes=max_total_bytes,
        )
        if reason:
            rejected.append(RejectedFile(raw_path, reason))
            continue
        accepted.append((path, data))
        taken.add(path)
        folders.update(_parent_folders(path))
        total += len(data)
    return accepted, rejected


def _limit_reason(
    size: int,
    count: int,
    total: int,
    *,
    max_files: int,
    max_file_bytes: int,
    max_total_bytes: int,
) -> str | None:
    if size > max_file_bytes:
        return f"File is {size} bytes; the limit per file is {max_file_bytes} bytes."
    if count >= max_files:
        return f"Too many files: only the first {max_files} are kept."
    if total + size > max_total_bytes:
        return f"Files would exceed the total size limit of {max_total_bytes} bytes."
    return None


def _clash_reason(path: str, taken: set[str], folders: set[str]) -> str | None:
    if path in taken:
        return f"Another file already has the path {path!r}."
    if path in folders:
        return f"{path!r} is already a folder holding other files."
    clash = next((folder for folder in _parent_folders(path) if folder in taken), None)
    if clash is not None:
        return f"Its folder {clash!r} is already a file."
    return None


def _parent_folders(path: str) -> list[str]:
    """`a/b/c.txt` → `["a", "a/b"]`."""
    parts = path.split("/")[:-1]
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


async def write_zip(dest: Path, members: Sequence[tuple[str, str]], store: ArtifactStore,
                    *, texts: Sequence[tuple[str, bytes]] = ()) -> None:
    """Write a zip of `(archive path, sha256)` members (and of `texts`, `(archive path,
    bytes)` made on the spot) to `dest`, atomically.

    Archive paths are checked like any file path; an unsafe or repeated one raises instead of
    being renamed. A member missing from the store raises `NotFound`. Contents are streamed
    from the store, never held in memory whole.
    """
    names = [check_relative_path(name) for name, _ in [*members, *texts]]
    if len(set(names)) != len(names):
        repeated = sorted({name for name in names if names.count(name) > 1})
        raise InvalidInput(f"The archive would hold the same path twice: {', '.join(repeated)}.")
    sources = [store.path_of(sha256) for _, sha256 in members]
    await asyncio.to_thread(_write_zip, dest, list(zip(names, sources, strict=False)),
                            [(check_relative_path(n), data) for n, data in texts])


def _write_zip(dest: Path, members: list[tuple[str, Path]],
               texts: Sequence[tuple[str, bytes]] = ()) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as file, zipfile.ZipFile(file, "w") as archive:
            for name, source in members:
                try:
                    src = source.open("rb")
                except FileNotFoundError:
                    raise NotFound(f"No artifact {source.parent.name}{source.name}.") from None
                info = zipfile.ZipInfo(name, date_time=_ZIP_DATE)
                info.compress_type = zipfile.ZIP_DEFLATED
                info.external_attr = 0o644 << 16
                # A known size lets zipfile switch to ZIP64 for members over 2 GiB.
                info.file_size = os.fstat(src.fileno()).st_size
                with src, archive.open(info, "w") as out:
                    shutil.copyfileobj(src, out)
            for name, data in texts:
                info = zipfile.ZipInfo(name, date_time=_ZIP_DATE)
                info.compress_type = zipfile.ZIP_DEFLATED
                info.external_attr = 0o644 << 16
                archive.writestr(info, data)
        os.replace(temp, dest)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
