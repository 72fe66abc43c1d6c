"""Tests for the on-disk result buffer."""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path

import pytest

from shoal.protocol import TaskResult
from shoal.worker.outbox import Outbox


def _names(folder: Path, pattern: str = "*") -> list[str]:
    return sorted(p.name for p in folder.glob(pattern))


def _result(output: str = "done") -> TaskResult:
    return TaskResult(attempt_id=uuid.uuid4(), fence=1, status="succeeded", output=output)


async def test_saved_result_is_pending(tmp_path: Path) -> None:
    """A saved result is on disk under its attempt id and comes back from pending()."""
    outbox = Outbox(tmp_path / "outbox")
    result = _result()
    await outbox.save(result)
    assert (tmp_path / "outbox" / f"{result.attempt_id}.json").is_file()
    assert await outbox.pending() == [result]


async def test_saved_with_its_json_reads_back_the_same(tmp_path: Path) -> None:
    """A result saved with the JSON the worker already made for the socket reads back equal."""
    outbox = Outbox(tmp_path / "outbox")
    result = _result("sent and saved")
    await outbox.save(result, result.model_dump_json())
    assert await outbox.pending() == [result]


async def test_remove_forgets_result(tmp_path: Path) -> None:
    """remove() deletes the file, and removing twice is harmless."""
    outbox = Outbox(tmp_path)
    result = _result()
    await outbox.save(result)
    await outbox.remove(result.attempt_id)
    await outbox.remove(result.attempt_id)
    assert await outbox.pending() == []


async def test_pending_is_ordered_by_write_time(tmp_path: Path) -> None:
    """Results come back oldest write first, whatever their ids."""
    outbox = Outbox(tmp_path)
    first, second = _result("first"), _result("second")
    await outbox.save(second)
    await outbox.save(first)
    os.utime(tmp_path / f"{first.attempt_id}.json", ns=(1_000, 1_000))
    os.utime(tmp_path / f"{second.attempt_id}.json", ns=(2_000, 2_000))
    assert [r.output for r in await outbox.pending()] == ["first", "second"]


async def test_save_replaces_earlier_result_without_leftovers(tmp_path: Path) -> None:
    """Saving the same attempt twice keeps one file and no temporary files."""
    outbox = Outbox(tmp_path)
    result = _result("old")
    await outbox.save(result)
    await outbox.save(result.model_copy(update={"output": "new"}))
    assert _names(tmp_path) == [f"{result.attempt_id}.json"]
    assert [r.output for r in await outbox.pending()] == ["new"]


async def test_corrupt_file_is_set_aside(tmp_path: Path) -> None:
    """An unreadable file is renamed to .corrupt instead of blocking every re-send."""
    outbox = Outbox(tmp_path)
    good = _result()
    await outbox.save(good)
    (tmp_path / f"{uuid.uuid4()}.json").write_text("{not json")
    assert await outbox.pending() == [good]
    assert len(_names(tmp_path, "*.corrupt")) == 1


async def test_missing_folder_has_nothing_pending(tmp_path: Path) -> None:
    """A worker that never buffered anything has an empty outbox."""
    assert await Outbox(tmp_path / "absent").pending() == []


async def test_concurrent_saves_are_each_durable_and_pending(tmp_path: Path) -> None:
    """Saves made at once (one group commit) all land, and so do removals made at once."""
    outbox = Outbox(tmp_path)
    results = [_result(f"r{i}") for i in range(40)]
    await asyncio.gather(*(outbox.save(r) for r in results))
    assert _names(tmp_path) == sorted(f"{r.attempt_id}.json" for r in results)
    assert sorted(r.output for r in await outbox.pending()) == sorted(r.output for r in results)
    await asyncio.gather(*(outbox.remove(r.attempt_id) for r in results[:30]))
    assert _names(tmp_path) == sorted(f"{r.attempt_id}.json" for r in results[30:])


async def test_a_failed_save_is_raised_to_its_caller(tmp_path: Path) -> None:
    """A batch that cannot be written fails every save in it, loudly."""
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    outbox = Outbox(blocker / "outbox")
    with pytest.raises(NotADirectoryError):
        await outbox.save(_result())
