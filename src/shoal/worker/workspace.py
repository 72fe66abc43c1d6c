"""Private workspaces: one folder per attempt, and the files an attempt produced in it.

`prepare_workspace` makes `<root>/<task_id>/<attempt_id>/` and writes the upstream files into
it (an attempt that brings no files may instead run in an empty folder made ahead of need under
`<root>/.ready/`, ADR 0017); `snapshot` fingerprints every file; after the tool ran,
`collect_files` returns the files that are new or changed. A file that breaks a limit or has
an unsafe name — control characters, a name that is not UTF-8, a symbolic link leading out of
the workspace — is rejected with a reason, never silently renamed or dropped. The search indexes
`shoal mcp sources` keeps in `.index/` (named by their source's content hash) are the one
exception: a cache, sent along while the limits allow and else left out without a word, so
that the control plane can hand them to the next worker over the same file. All functions
here block: call them through `asyncio.to_thread` — except `prepare_bare_workspace` and
`is_bare`, the fast paths for an attempt that brings no files and leaves none, which touch one
or two folders.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import os
import re
import shutil
import uuid
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path

from shoal.artifacts.paths import check_relative_path, resolve_inside
from shoal.errors import UnsafePath
from shoal.protocol import ExecuteTask, FilePayload, RejectedFile

SKIPPED_DIRS = frozenset(
    {".git", "__pycache__", ".venv", "venv", "node_modules", ".pytest_cache", ".mypy_cache",
     ".ruff_cache", ".tox",
     ".index",  # `shoal mcp sources`' search index, not work (sent as a cache, below)
     ".literature"}  # `shoal mcp literature`'s answers, kept for the attempt: not work
)
CACHE_DIR = ".index"  # its indexes, sent as a cache (`_cache_files`), not as work
# `<source sha256>.<what>.sqlite|json`, as `shoal.retrieval.handoff` names them (no lock files)
CACHE_NAME = re.compile(r"^[0-9a-f]{64}\.[A-Za-z0-9_.-]{0,80}\.(sqlite|json)$")
SOURCE_OF = re.compile(r"^([0-9a-f]{64})\.")  # an index file's source, by its content hash
_CHUNK = 1024 * 1024


class _Rejected(Exception):
    """A produced file Shoal refuses; the message is the reason shown to people."""


@dataclass(slots=True)
class _Budget:
    """What is left of a result's limits while files are collected."""

    max_files: int
    max_file_bytes: int
    max_total_bytes: int
    files: int = 0
    total_bytes: int = 0

    def check(self, size: int) -> None:
        """Raise `_Rejected` if one more file of `size` bytes would break a limit."""
        if size > self.max_file_bytes:
            raise _Rejected(f"file is {size:,} bytes; the limit is {self.max_file_bytes:,} "
                            "bytes per file")
        if self.files >= self.max_files:
            raise _Rejected(f"the result already holds the maximum of {self.max_files} files")
        if self.total_bytes + size > self.max_total_bytes:
            raise _Rejected(f"the result would pass its total limit of "
                            f"{self.max_total_bytes:,} bytes")

    def take(self, size: int) -> None:
        """Count one collected file of `size` bytes."""
        self.files += 1
        self.total_bytes += size


def workspace_path(root: Path, msg: ExecuteTask) -> Path:
    """Where the workspace of the attempt in `msg` lives."""
    return root / str(msg.task_id) / str(msg.attempt_id)


def prepare_workspace(root: Path, msg: ExecuteTask) -> tuple[Path, list[RejectedFile]]:
    """Create a clean workspace for `msg` and write its upstream files into it.

    Returns the workspace (absolute) and the upstream files that were skipped, with reasons.
    """
    workspace = workspace_path(root, msg)
    if workspace.exists():  # left by a run of this attempt before the worker restarted
        shutil.rmtree(workspace)
    workspace.mkdir(parents=True)
    workspace = workspace.resolve()
    skipped: list[RejectedFile] = []
    for upstream in msg.upstream:
        for file in upstream.files:
            problem = _materialise(workspace, file)
            if problem is not None:
                skipped.append(RejectedFile(path=_display(file.path), reason=problem))
    return workspace, skipped


def prepare_bare_workspace(root: Path, msg: ExecuteTask) -> Path | None:
    """`prepare_workspace`'s fast path, for an attempt that brings no upstream files.

    Creates the attempt's folder under `root` (which must already be resolved) and returns it;
    None when the full path is needed: files to write, or a folder left by an earlier run of
    the attempt. It makes at most two folders, so it may run on the event loop.
    """
    if any(upstream.files for upstream in msg.upstream):
        return None
    workspace = workspace_path(root, msg)
    try:
        workspace.mkdir(parents=True)
    except OSError:  # left by an earlier run, or a real problem: the full path reports it
        return None
    return workspace


def is_bare(workspace: Path) -> bool:
    """Whether `workspace` holds nothing at all (one directory read; may run on the loop)."""
    try:
        with os.scandir(workspace) as entries:
            return next(entries, None) is None
    except OSError:
        return False


def _materialise(workspace: Path, file: FilePayload) -> str | None:
    """Write one upstream file; return why it was skipped, or None."""
    try:
        target = resolve_inside(workspace, file.path)
        data = base64.b64decode(file.content_b64, validate=True)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    except UnsafePath as exc:
        return exc.message
    except binascii.Error:
        return "content is not valid base64"
    except OSError as exc:
        return f"could not be written: {exc.strerror or exc}"
    return None


def snapshot(workspace: Path) -> dict[str, str]:
    """Fingerprint every file in `workspace`: relative path → sha256 (or link target)."""
    entries, _ = _list_files(workspace)
    prints: dict[str, str] = {}
    for rel, path in [*entries, *_cache_files(workspace)]:
        try:
            prints[rel] = _fingerprint(path)
        except OSError:
            continue  # vanished or unreadable: it will be judged again when collected
    return prints


def snapshot_one(path: Path) -> str:
    """One file's fingerprint, as `snapshot` takes it."""
    return _fingerprint(path)


def collect_files(
    workspace: Path,
    before: dict[str, str],
    *,
    max_files: int,
    max_file_bytes: int,
    max_total_bytes: int,
) -> tuple[list[FilePayload], list[RejectedFile]]:
    """Return the files new or changed since `before`, and the ones refused with reasons."""
    entries, rejected = _list_files(workspace)
    budget = _Budget(max_files, max_file_bytes, max_total_bytes)
    files: list[FilePayload] = []
    for rel, path in sorted(entries):
        try:
            payload = _collect_one(workspace, rel, path, before.get(rel), budget)
        except _Rejected as exc:
            rejected.append(RejectedFile(path=_display(rel), reason=str(exc)))
        else:
            if payload is not None:
                files.append(payload)
    for rel, path in _cache_files(workspace):  # after the work, with what room is left
        try:
            payload = _collect_one(workspace, rel, path, before.get(rel), budget)
        except _Rejected:
            continue  # a cache: the next worker builds its own
        if payload is not None:
            files.append(payload)
    return files, rejected


def _cache_files(workspace: Path) -> list[tuple[str, Path]]:
    """The index files in `.index/` (regular files named `<sha256>.<what>`), name order."""
    folder = workspace / CACHE_DIR
    if folder.is_symlink() or not folder.is_dir():
        return []
    return [(f"{CACHE_DIR}/{p.name}", p) for p in sorted(folder.iterdir())
            if CACHE_NAME.match(p.name) and not p.is_symlink() and p.is_file()]


def _collect_one(
    workspace: Path, rel: str, path: Path, previous: str | None, budget: _Budget
) -> FilePayload | None:
    """The payload for one file, None when it is unchanged or gone; raise `_Rejected`."""
    _check_name(rel)
    try:
        if _fingerprint(path) == previous:
            return None
        source = _readable_file(workspace, rel, path)
        budget.check(source.stat().st_size)
        data = source.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _Rejected(f"could not be read: {exc.strerror or exc}") from None
    budget.check(len(data))  # it may have grown since stat()
    budget.take(len(data))
    return FilePayload(path=rel, content_b64=base64.b64encode(data).decode("ascii"))


def _check_name(rel: str) -> None:
    try:
        rel.encode("utf-8")
    except UnicodeEncodeError:
        raise _Rejected("file name is not valid UTF-8") from None
    try:
        check_relative_path(rel)
    except UnsafePath as exc:
        raise _Rejected(exc.message) from None


def _readable_file(workspace: Path, rel: str, path: Path) -> Path:
    """The regular file whose bytes stand for `path`, following a link only inside."""
    if path.is_symlink():
        try:
            path = resolve_inside(workspace, rel)
        except UnsafePath:
            raise _Rejected("symbolic link points outside the workspace") from None
    if not path.is_file():
        raise _Rejected("not a regular file")
    return path


def _fingerprint(path: Path) -> str:
    if path.is_symlink():
        return "link:" + os.readlink(path)
    if not path.is_file():
        return "special"
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _list_files(workspace: Path) -> tuple[list[tuple[str, Path]], list[RejectedFile]]:
    """Every non-folder entry under `workspace` outside `SKIPPED_DIRS`, and unreadable folders."""
    entries: list[tuple[str, Path]] = []
    unreadable: list[RejectedFile] = []
    stack = [workspace]
    while stack:
        folder = stack.pop()
        try:
            children = list(os.scandir(folder))
        except OSError as exc:
            rel = folder.relative_to(workspace).as_posix()
            reason = f"folder could not be read: {exc.strerror or exc}"
            unreadable.append(RejectedFile(path=_display(rel), reason=reason))
            continue
        for child in children:
            path = Path(child.path)
            if child.is_dir(follow_symlinks=False):
                if child.name not in SKIPPED_DIRS:
                    stack.append(path)
            else:
                entries.append((path.relative_to(workspace).as_posix(), path))
    return entries, unreadable


def _display(name: str) -> str:
    """`name` made safe to show and to encode as JSON: odd bytes and controls escaped."""
    text = name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in text)


def remove_workspaces(root: Path, task_id: str) -> None:
    """Delete every workspace of one task."""
    shutil.rmtree(root / task_id, ignore_errors=True)


def kept(root: Path, index_dir: Path, *, most: int) -> tuple[list[uuid.UUID], list[str]]:
    """The tasks whose workspaces are under `root`, and the sources (content hashes) whose
    search indexes are in `index_dir`: the `most` recently used of each."""
    tasks = _newest(root, most, lambda p: p.is_dir() and _task_id(p.name) is not None)
    sources = _newest(index_dir, 10 * most, lambda p: SOURCE_OF.match(p.name) is not None)
    hashes = dict.fromkeys(m.group(1) for p in sources if (m := SOURCE_OF.match(p.name)))
    return [t for p in tasks if (t := _task_id(p.name))], list(hashes)[:most]


def forget(root: Path, index_dir: Path, task_ids: Collection[uuid.UUID],
           sources: Collection[str], *, protect: Collection[str] = ()) -> tuple[int, int]:
    """Delete the workspaces of `task_ids` (but those in `protect`: still running) and the
    index files built on `sources`; how many task folders and index files went."""
    folders = [root / str(t) for t in task_ids if str(t) not in protect]
    gone = [f for f in folders if f.is_dir()]
    for folder in gone:
        shutil.rmtree(folder, ignore_errors=True)
    wanted = set(sources)
    files = [p for p in _entries(index_dir)
             if (m := SOURCE_OF.match(p.name)) is not None and m.group(1) in wanted]
    for path in files:
        path.unlink(missing_ok=True)
    return len(gone), len(files)


def _newest(folder: Path, most: int, keep: Callable[[Path], bool]) -> list[Path]:
    found = []
    for path in _entries(folder):
        with contextlib.suppress(OSError):
            if keep(path):
                found.append((path.stat().st_mtime, path))
    found.sort(key=lambda item: item[0], reverse=True)
    return [path for _, path in found[:most]]


def _entries(folder: Path) -> list[Path]:
    try:
        return list(folder.iterdir())
    except OSError:  # not made yet
        return []


def _task_id(name: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(name)
    except ValueError:
        return None


def prune_workspaces(root: Path, *, keep: int, protect: Collection[str] = ()) -> list[str]:
    """Delete all but the `keep` most recently used task folders; never those in `protect`.

    Returns the task ids whose workspaces were removed.
    """
    if not root.is_dir():
        return []
    folders = [p for p in root.iterdir()
               if p.is_dir() and p.name not in protect and not p.name.startswith(".")]
    folders.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    removed = [p.name for p in folders[keep:]]
    for task_id in removed:
        remove_workspaces(root, task_id)
    return removed


# ---- folders made ahead of need (ADR 0017) -----------------------------------------------------

READY_DIR = ".ready"  # under the workspaces root; a task id never starts with a dot


def reset_ready(root: Path, count: int) -> list[Path]:
    """Clear what an earlier run left in `root/.ready` (folders of attempts it was running:
    their results were collected or their attempts run again) and make `count` empty ones."""
    shutil.rmtree(root / READY_DIR, ignore_errors=True)
    return make_ready(root, count)


def make_ready(root: Path, count: int) -> list[Path]:
    """`count` new empty folders under `root/.ready`."""
    folder = root / READY_DIR
    folder.mkdir(parents=True, exist_ok=True)
    made = []
    for _ in range(count):
        path = folder / uuid.uuid4().hex
        path.mkdir()
        made.append(path)
    return made


def file_away(used: Collection[tuple[Path, Path | None]]) -> None:
    """Put used ready folders away: one an attempt left files in moves to that attempt's own
    place (`workspace_path`), where it is kept and pruned like any other workspace; one whose
    target is None (left empty) is removed."""
    for source, target in used:
        if target is None:
            try:
                source.rmdir()  # one call for the folder left empty, as it usually still is
            except OSError:
                shutil.rmtree(source, ignore_errors=True)
            continue
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.exists():  # left by an earlier run of the same attempt
                shutil.rmtree(target)
            os.replace(source, target)
        except OSError:  # keep nothing half-moved in the pool's folder
            shutil.rmtree(source, ignore_errors=True)
