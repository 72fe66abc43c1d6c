"""The model-call journal: what the agent loop already paid for, per subtask, on disk.

Each answer is appended to `<dir>/<subtask_id>.jsonl` as `{"key", "answer"}`, where the key is
a hash of everything the request depends on (provider, model, system prompt, conversation,
tools). A later attempt of the same subtask on this worker that sends the same request gets
the journalled answer back instead of calling the model again. A line cut short by a crash is
skipped. A subtask's journal is removed when an attempt succeeds; journals untouched for a week
are pruned when a journal is opened.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from shoal.tools.models.base import ModelAnswer, ToolDef, Turn

PRUNE_AFTER = 7 * 24 * 3600.0


class Journal:
    """The journal of one subtask (or a no-op one when there is no folder)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._known: dict[str, ModelAnswer] = {}
        if path is not None and path.exists():
            self._load(path)

    @classmethod
    def open(cls, folder: Path | None, subtask_id: uuid.UUID) -> Journal:
        if folder is None:
            return cls(None)
        folder.mkdir(parents=True, exist_ok=True)
        _prune(folder)
        return cls(folder / f"{subtask_id}.jsonl")

    @staticmethod
    def key(provider: str, model: str, system: str, turns: Sequence[Turn],
            tools: Sequence[ToolDef]) -> str:
        request = {"provider": provider, "model": model, "system": system,
                   "turns": [t.as_dict() for t in turns],
                   "tools": [[t.name, t.description, t.parameters] for t in tools]}
        canonical = json.dumps(request, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()

    def get(self, key: str) -> ModelAnswer | None:
        return self._known.get(key)

    def put(self, key: str, answer: ModelAnswer) -> None:
        self._known[key] = answer
        if self.path is None:
            return
        line = json.dumps({"key": key, "answer": answer.as_dict()}, separators=(",", ":"))
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(line + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    def discard(self) -> None:
        self._known.clear()
        if self.path is not None:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()

    def __len__(self) -> int:
        return len(self._known)

    def _load(self, path: Path) -> None:
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                entry: Any = json.loads(line)
                self._known[str(entry["key"])] = ModelAnswer.from_dict(entry["answer"])
            except (ValueError, KeyError, TypeError):
                continue  # a line cut short by a crash


def _prune(folder: Path) -> None:
    cutoff = time.time() - PRUNE_AFTER
    for entry in folder.glob("*.jsonl"):
        with contextlib.suppress(OSError):
            if entry.stat().st_mtime < cutoff:
                entry.unlink()
