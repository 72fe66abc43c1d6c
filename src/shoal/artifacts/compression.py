"""Archive bombs: what the members of a zip declare they unpack to, checked before any is read.

A zip of sources (`shoal.artifacts.archives`) and the zip a Word document or an Excel workbook
is inside (`shoal.artifacts.office`) both pass `check_declared` first: the members' declared
sizes in all, members that overlap (their compressed data runs into the next header, as in
bombs that reuse one stream), and each member's declared ratio of unpacked to compressed bytes
(counted once it passes `RATIO_GRACE_BYTES`: a small file of repeated bytes compresses that well
honestly, and the total bounds it anyway). Python's `zipfile` then stops every member at its
declared size while reading it, so what is read is what was checked.
"""

from __future__ import annotations

import zipfile
from collections.abc import Sequence

from shoal.artifacts.paths import label
from shoal.errors import InvalidInput

RATIO_GRACE_BYTES = 1 << 20
"""A member may unpack to this much whatever its ratio."""


def check_declared(archive: zipfile.ZipFile, entries: Sequence[zipfile.ZipInfo], size: int, *,
                   max_total_bytes: int, max_ratio: float, what: str = "The zip",
                   advice: str = "Upload the files themselves, or a smaller zip.") -> None:
    """Refuse `entries` (members of `archive`, a file of `size` bytes) as an archive bomb when
    they declare over `max_total_bytes` in all, overlap, or one declares over `max_ratio`
    times its compressed size: `InvalidInput` (422) starting "`what` is refused as an archive
    bomb" and ending with `advice`."""
    declared = sum(info.file_size for info in entries)
    if declared > max_total_bytes:
        raise bomb(f"its files declare {declared:,} bytes unpacked, over the limit of "
                   f"{max_total_bytes:,}", what=what, advice=advice)
    spans = _spans(archive.infolist(), size)
    for info in entries:
        if info.compress_size > spans[id(info)]:
            raise bomb(f"its member {label(info.filename)} overlaps the next one", what=what,
                       advice=advice)
        if info.file_size > max(RATIO_GRACE_BYTES, max_ratio * packed_size(info)):
            raise bomb(f"its member {label(info.filename)} declares {info.file_size:,} bytes "
                       f"from {info.compress_size:,} compressed (limit {max_ratio:g}:1)",
                       what=what, advice=advice)


def packed_size(info: zipfile.ZipInfo) -> int:
    """A member's compressed size, at least 1 (a ratio's divisor)."""
    return max(info.compress_size, 1)


def bomb(reason: str, *, what: str = "The zip",
         advice: str = "Upload the files themselves, or a smaller zip.") -> InvalidInput:
    """The refusal of an archive bomb, saying why."""
    return InvalidInput(f"{what} is refused as an archive bomb: {reason}. {advice}")


def _spans(infos: list[zipfile.ZipInfo], size: int) -> dict[int, int]:
    """Each member's room from its header to the next header (or the end of the file): its
    compressed data cannot be longer, unless members overlap as in some archive bombs."""
    ordered = sorted(infos, key=lambda info: info.header_offset)
    ends = [info.header_offset for info in ordered[1:]] + [size]
    return {id(info): end - info.header_offset for info, end in zip(ordered, ends, strict=True)}
