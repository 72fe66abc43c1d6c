"""Indexes handed between workers through the control plane: `shoal mcp sources` keeps its
indexes in the worker's index folder, where every later task on that worker finds them; the
attempt's workspace has a `.index/` folder besides, through which they travel. Before building,
the server adopts what the control plane handed it there (`adopt`); after, it publishes the
indexes of the task's sources there (`publish`), and the worker sends them back as a cache of
the task (`worker.workspace`), for the next worker over the same file.

A file is named by its source's content hash (`<sha256>.v2.sqlite`, `<sha256>.graph….json`),
so a file can only stand for the content it was made from. These functions block: call them in
a thread.
"""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import uuid
from collections.abc import Collection
from pathlib import Path

INDEX_FILE = re.compile(r"^(?P<sha>[0-9a-f]{64})\.[A-Za-z0-9_.-]{0,80}\.(sqlite|json)$")


def adopt(shared: Path, primary: Path) -> list[str]:
    """Copy the index files in `shared` that `primary` lacks into it; their names."""
    if not shared.is_dir() or _same(shared, primary):
        return []
    primary.mkdir(parents=True, exist_ok=True)
    taken: list[str] = []
    for path in sorted(shared.iterdir()):
        if INDEX_FILE.match(path.name) and path.is_file() and not path.is_symlink() \
                and not (primary / path.name).exists():
            _copy(path, primary / path.name)
            taken.append(path.name)
    return taken


def publish(primary: Path, shared: Path, shas: Collection[str]) -> list[str]:
    """Copy `primary`'s index files of the sources `shas` into `shared` where missing or
    older; their names."""
    if not primary.is_dir() or _same(shared, primary) or not shas:
        return []
    shared.mkdir(parents=True, exist_ok=True)
    given: list[str] = []
    for path in sorted(primary.iterdir()):
        found = INDEX_FILE.match(path.name)
        if found is None or found["sha"] not in shas or not path.is_file():
            continue
        there = shared / path.name
        if there.exists() and there.stat().st_mtime_ns >= path.stat().st_mtime_ns:
            continue
        _copy(path, there)
        given.append(path.name)
    return given


def _copy(source: Path, target: Path) -> None:
    """`source` to `target` whole or not at all: a SQLite file through its backup API (a
    consistent copy even while another process writes it), anything else byte for byte."""
    scratch = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
    try:
        if source.suffix == ".sqlite":
            with sqlite3.connect(f"file:{source}?mode=ro", uri=True) as src, \
                    sqlite3.connect(scratch) as dst:
                src.backup(dst)
            src.close()
            dst.close()
        else:
            shutil.copyfile(source, scratch)
        os.replace(scratch, target)
    finally:
        scratch.unlink(missing_ok=True)


def _same(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False
