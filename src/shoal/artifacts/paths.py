"""Safe relative paths for files that come from agents.

A name is refused — never silently rewritten — when it is empty, absolute, climbs with `..`,
holds NUL or control characters or a backslash, or is too long.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from shoal.errors import UnsafePath
from shoal.limits import shown, text_problem

MAX_PATH_LENGTH = 512
MAX_PART_LENGTH = 255


def check_relative_path(path: str) -> str:
    """Return `path` normalised to POSIX form if it is a safe relative path; else raise."""
    if not path or not path.strip():
        raise UnsafePath("File path is empty.", details={"path": path})
    if len(path) > MAX_PATH_LENGTH:
        raise UnsafePath(f"File path is longer than {MAX_PATH_LENGTH} characters.",
                         details={"path": path[:80] + "…"})
    if any(ord(c) < 32 or ord(c) == 127 for c in path):
        raise UnsafePath("File path contains NUL or control characters.", details={"path": path})
    if text_problem(path):
        raise UnsafePath("File path is not valid Unicode text.", details={"path": repr(path)})
    if "\\" in path:
        raise UnsafePath("File path contains a backslash.", details={"path": path})
    pure = PurePosixPath(path)
    if pure.is_absolute() or path.startswith("~"):
        raise UnsafePath("File path is absolute.", details={"path": path})
    parts = [p for p in pure.parts if p not in ("", ".")]
    if not parts:
        raise UnsafePath("File path names no file.", details={"path": path})
    if any(p == ".." for p in parts):
        raise UnsafePath("File path climbs out of its folder with '..'.", details={"path": path})
    if any(len(p) > MAX_PART_LENGTH for p in parts):
        raise UnsafePath("A part of the file path is too long.", details={"path": path})
    return "/".join(parts)


def label(name: str) -> str:
    """`name` quoted for a message: short, and with NULs and lone surrogates escaped."""
    return repr(shown(name if len(name) <= 80 else name[:80] + "…"))


def resolve_inside(root: Path, path: str) -> Path:
    """Resolve `path` under `root`, refusing anything (including symlinks) that escapes it."""
    rel = check_relative_path(path)
    base = root.resolve()
    target = (base / rel).resolve()
    if target != base and base not in target.parents:
        raise UnsafePath("File path resolves outside its folder.", details={"path": path})
    return target
