"""The `Content-Disposition` header of a download (RFC 6266), for any file name."""

from __future__ import annotations

import unicodedata
from pathlib import PurePosixPath
from urllib.parse import quote


def content_disposition(filename: str, *, inline: bool = False) -> str:
    """`attachment` (or `inline`) with the name twice: an ASCII fallback in `filename=` for old
    clients, and the exact name, UTF-8 and percent-encoded, in `filename*=` (RFC 5987)."""
    name = PurePosixPath(filename).name or "download"
    kind = "inline" if inline else "attachment"
    fallback = _ascii_fallback(name)
    if fallback == name:
        return f'{kind}; filename="{name}"'
    return f"{kind}; filename=\"{fallback}\"; filename*=UTF-8''{quote(name, safe='')}"


def _ascii_fallback(name: str) -> str:
    """`name` as printable ASCII without quotes or backslashes: accents dropped, anything else
    replaced by `_`."""
    folded = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
    cleaned = "".join(c if 32 <= ord(c) < 127 and c not in '"\\' else "_" for c in folded)
    cleaned = cleaned.strip()
    return f"download{cleaned}" if not cleaned or cleaned.startswith(".") else cleaned
