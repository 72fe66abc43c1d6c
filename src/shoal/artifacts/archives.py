"""Zip uploads: unpacked safely into files that are then handled like any other source.

A `.zip` upload sniffs as `Archive.zip` (see `shoal.artifacts.sources`): it is a container,
not a source. `expand_zip` unpacks it flat into a folder, checking every member's path and
name (as `checked_name` would), refusing links, encryption, unusual compression and nested
zips, and accounting for archive bombs: the declared sizes, overlapping members
(`shoal.artifacts.compression`) and the real bytes that come out are all counted against the
limits. The files it returns then go through
`sniff_file`, `validate` and `extract_text` one by one. Refusals are `InvalidInput` (422).
"""

from __future__ import annotations

import stat
import struct
import unicodedata
import zipfile
import zlib
from contextlib import suppress
from pathlib import Path, PurePosixPath
from typing import IO

from shoal.artifacts.compression import RATIO_GRACE_BYTES, bomb, check_declared, packed_size
from shoal.artifacts.paths import check_relative_path, label
from shoal.artifacts.sources import name_problem
from shoal.errors import InvalidInput, UnsafePath
from shoal.limits import shown

_ZIP_ERRORS = (zipfile.BadZipFile, zlib.error, EOFError, ValueError, OverflowError,
               NotImplementedError, struct.error)
_JUNK = ("__MACOSX/", ".DS_Store")


def expand_zip(path: Path, into: Path, *, max_members: int, max_total_bytes: int,
               max_ratio: float) -> list[tuple[str, Path]]:
    """Unpack the zip at `path` into the folder `into` (created if missing; it should hold
    nothing of the same names) and return each file's `(name, path)` in archive order.

    Folders inside the zip are flattened: a member is named by its last part, checked like
    `checked_name`; two members of one name are refused. A backslash separates folders too
    (some Windows tools write them). Folder entries, `__MACOSX/` and `.DS_Store` (macOS's
    bookkeeping) are skipped. Refused with `InvalidInput` (422): a zip
    that is damaged, password-protected, compressed other than stored or deflated, holds no
    file or over `max_members`, a symbolic link, an absolute or `..` path, a nested zip, and
    an **archive bomb**: files that declare or actually unpack past `max_total_bytes` in all,
    members that overlap, or a member unpacking over `max_ratio` times its compressed size
    (counted once it passes 1 MiB: a small file of repeated bytes compresses that well
    honestly, and the total bounds it anyway). Bytes are counted while unpacking, never taken
    from the headers alone. On any refusal or error, what was unpacked is removed.
    """
    made = not into.exists()
    into.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    try:
        with _open_zip(path) as archive:
            members = _members(archive, path.stat().st_size, max_members=max_members,
                               max_total_bytes=max_total_bytes, max_ratio=max_ratio)
            room = max_total_bytes
            for name, info, packed in members:
                with (into / name).open("xb") as out:
                    written.append(into / name)
                    room -= _unpack(archive, info, out, room=room,
                                    ratio_limit=max_ratio * packed)
    except BaseException:
        for file in written:
            file.unlink(missing_ok=True)
        if made:
            with suppress(OSError):
                into.rmdir()
        raise
    return [(name, into / name) for name, _, _ in members]


def _open_zip(path: Path) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(path)
    except _ZIP_ERRORS as exc:
        raise InvalidInput(f"The zip cannot be read ({exc}); it may be damaged. Create it "
                           "again and upload the new file.") from None


def _members(archive: zipfile.ZipFile, size: int, *, max_members: int, max_total_bytes: int,
             max_ratio: float) -> list[tuple[str, zipfile.ZipInfo, int]]:
    """The files to unpack as `(name, info, compressed bytes)`, checked before any is."""
    entries = [info for info in archive.infolist() if not info.is_dir()
               and not info.filename.startswith(_JUNK[0])
               and PurePosixPath(info.filename).name != _JUNK[1]]
    if not entries:
        raise InvalidInput("The zip holds no files.")
    if len(entries) > max_members:
        raise InvalidInput(f"The zip holds {len(entries):,} files; at most {max_members:,} "
                           "are allowed. Upload fewer files at a time.")
    members: list[tuple[str, zipfile.ZipInfo, int]] = []
    seen: set[str] = set()
    for info in entries:
        name = _member_name(info)
        if name in seen:
            raise InvalidInput(f"The zip holds two files named {label(name)} (folders are "
                               "flattened). Rename one and upload it again.")
        members.append((name, info, packed_size(info)))
        seen.add(name)
    check_declared(archive, entries, size, max_total_bytes=max_total_bytes, max_ratio=max_ratio)
    return members


def _member_name(info: zipfile.ZipInfo) -> str:
    raw = info.filename
    if stat.S_ISLNK(info.external_attr >> 16):
        raise InvalidInput(f"The zip member {label(raw)} is a symbolic link; links are not "
                           "unpacked. Zip the file it points to instead.")
    if info.flag_bits & 0x1:
        raise InvalidInput(f"The zip member {label(raw)} is password-protected. Zip the "
                           "files without a password and upload again.")
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise InvalidInput(f"The zip member {label(raw)} uses a compression method Shoal "
                           "does not unpack. Create the zip with standard (deflate) compression.")
    try:
        check_relative_path(raw.replace("\\", "/"))
    except UnsafePath as exc:
        raise UnsafePath(f"The zip member {label(raw)} has an unsafe path: {exc.message}",
                         details={"member": shown(raw)}) from None
    name = PurePosixPath(raw.replace("\\", "/")).name
    if problem := name_problem(name):
        raise UnsafePath(f"The zip member {label(raw)} has a file name that {problem}.",
                         details={"member": shown(raw)})
    if name.lower().endswith(".zip"):
        raise _nested(raw)
    return unicodedata.normalize("NFC", name)


def _unpack(archive: zipfile.ZipFile, info: zipfile.ZipInfo, out: IO[bytes], *, room: int,
            ratio_limit: float) -> int:
    """Copy one member to `out`, counting what really comes out; the bytes written."""
    written = 0
    try:
        with archive.open(info) as member:
            while chunk := member.read(64 << 10):
                if not written and chunk.startswith((b"PK\x03\x04", b"PK\x05\x06")):
                    raise _nested(info.filename)
                written += len(chunk)
                if written > room or written > info.file_size or (
                        written > RATIO_GRACE_BYTES and written > ratio_limit):
                    raise bomb(f"its member {label(info.filename)} unpacks past what its "
                                "header declares or the limits allow")
                out.write(chunk)
    except _ZIP_ERRORS as exc:
        raise InvalidInput(f"The zip member {label(info.filename)} cannot be unpacked ({exc}); "
                           "the zip may be damaged. Create it again and upload it.") from None
    return written


def _nested(raw: str) -> InvalidInput:
    return InvalidInput(f"The zip holds another zip, {label(raw)}; nested zips are not "
                        "unpacked. Put its files in the outer zip instead.")
