"""Taking uploads in: each file of a multipart request is copied to the store's scratch folder
while it is hashed (never held whole in memory), named, sniffed from its content, checked,
and its text extracted; a zip's members are taken one by one. All or nothing: the files go into
the content-addressed store only when every one of them passed, and a refused request leaves
no file behind.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from shoal.artifacts.archives import expand_zip
from shoal.artifacts.sources import (
    Archive,
    SourceKind,
    checked_name,
    extract_text,
    sniff_file,
    validate,
)
from shoal.artifacts.store import ArtifactStore
from shoal.config import Settings
from shoal.errors import InvalidInput, PayloadTooLarge

CHUNK = 1024 * 1024
ZIP_MEMBERS = 200  # files a zip may hold
ZIP_RATIO = 100.0  # unpacked bytes per packed byte a member may reach (past 1 MiB)


@dataclass(frozen=True, slots=True)
class Taken:
    """One source ready to be stored: its name, kind, bytes and text (files in scratch)."""

    name: str
    kind: SourceKind
    size: int
    sha256: str
    path: Path
    text_sha256: str
    text_path: Path
    text_chars: int


def receive(files: list[tuple[str, IO[bytes]]], store: ArtifactStore,
            settings: Settings) -> list[Taken]:
    """Every source in `files` ((name as sent, content) pairs), checked (blocking: run it in
    a thread). Raises what the first refusal is, having removed every scratch file."""
    scratch: list[Path] = []
    try:
        taken: list[Taken] = []
        for sent_name, content in files:
            name = checked_name(sent_name)
            path = store.scratch_file()
            scratch.append(path)
            sha = _copy(content, path, limit=settings.max_upload_bytes, name=name)
            taken.extend(_sources(name, path, sha, store, settings, scratch))
        _no_twice(t.name for t in taken)
    except BaseException:
        for path in scratch:
            path.unlink(missing_ok=True)
        raise
    return taken


def adopt(taken: list[Taken], store: ArtifactStore) -> None:
    """Move checked sources (and their texts) into the store (blocking)."""
    for t in taken:
        store.adopt(t.path, t.sha256)
        store.adopt(t.text_path, t.text_sha256)


def discard(taken: list[Taken]) -> None:
    """Remove the scratch files of sources that will not be stored."""
    for t in taken:
        t.path.unlink(missing_ok=True)
        t.text_path.unlink(missing_ok=True)


def _copy(content: IO[bytes], path: Path, *, limit: int, name: str) -> str:
    """Copy `content` to `path`, at most `limit` bytes; its SHA-256."""
    size, digest = 0, hashlib.sha256()
    with path.open("wb") as out:
        while chunk := content.read(CHUNK):
            size += len(chunk)
            if size > limit:
                raise PayloadTooLarge(f"{name!r} is larger than {limit} bytes, the limit for one "
                                      "upload.", details={"field": "file", "name": name})
            digest.update(chunk)
            out.write(chunk)
    return digest.hexdigest()


def _sources(name: str, path: Path, sha: str, store: ArtifactStore, settings: Settings,
             scratch: list[Path]) -> list[Taken]:
    """The sources one uploaded file (of hash `sha`) holds: itself, or a zip's members."""
    kind = sniff_file(path, name)
    if isinstance(kind, Archive):
        into = store.scratch_folder()
        try:
            members = expand_zip(path, into, max_members=min(ZIP_MEMBERS,
                                                             settings.max_upload_files * 10),
                                 max_total_bytes=settings.max_upload_bytes,
                                 max_ratio=ZIP_RATIO)
            out = []
            for member, member_path in members:
                moved = store.scratch_file()
                scratch.append(moved)
                shutil.move(member_path, moved)
                member_kind = sniff_file(moved, member)
                if isinstance(member_kind, Archive):
                    raise InvalidInput(f"{member!r} in {name!r} is a zip inside a zip; send "
                                       "its files instead.", details={"field": "file"})
                out.append(_source(member, member_kind, moved, _sha256(moved), store,
                                   settings, scratch))
            return out
        finally:
            shutil.rmtree(into, ignore_errors=True)
    return [_source(name, kind, path, sha, store, settings, scratch)]


def _source(name: str, kind: SourceKind, path: Path, sha: str, store: ArtifactStore,
            settings: Settings, scratch: list[Path]) -> Taken:
    validate(path, kind)
    text = extract_text(path, kind, max_chars=settings.source_text_chars)
    text_path = store.scratch_file()
    scratch.append(text_path)
    data = text.encode("utf-8")
    text_path.write_bytes(data)
    return Taken(name=name, kind=kind, size=path.stat().st_size, sha256=sha,
                 path=path, text_sha256=hashlib.sha256(data).hexdigest(), text_path=text_path,
                 text_chars=len(text))


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while chunk := file.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _no_twice(names: Iterable[str]) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise InvalidInput(f"Two files are named {name!r}: a task's sources need names of "
                               "their own.", details={"field": "file", "name": name})
        seen.add(name)
