"""Tests for the on-disk result log (ADR 0016)."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from shoal.protocol import TaskResult
from shoal.worker import outbox as outbox_module
from shoal.worker.outbox import CORRUPT_NAME, LOG_NAME, Outbox, read_pending


def _result(output: str = "done") -> TaskResult:
    return TaskResult(attempt_id=uuid.uuid4(), fence=1, status="succeeded", output=output)


def _names(folder: Path, pattern: str = "*") -> list[str]:
    return sorted(p.name for p in folder.glob(pattern))


def _outputs(results: list[TaskResult]) -> list[str]:
    return [r.output for r in results]


async def test_saved_result_is_pending_here_and_after_a_restart(tmp_path: Path) -> None:
    """A saved result comes back from pending() and from the log a restarted worker reads."""
    outbox = Outbox(tmp_path / "outbox")
    result = _result()
    await outbox.save(result)
    assert await outbox.pending() == [result]
    assert read_pending(tmp_path / "outbox") == [result]
    assert await Outbox(tmp_path / "outbox").pending() == [result]


async def test_saved_with_its_json_reads_back_the_same(tmp_path: Path) -> None:
    """A result saved with the JSON the worker already made for the socket reads back equal."""
    outbox = Outbox(tmp_path)
    result = _result("sent and saved")
    await outbox.save(result, result.model_dump_json())
    assert read_pending(tmp_path) == [result]


async def test_remove_forgets_result_and_empties_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """remove() forgets a result, twice is harmless, and a long log with nothing left in it
    is truncated."""
    monkeypatch.setattr(outbox_module, "RESTART_BYTES", 1)
    outbox = Outbox(tmp_path)
    result = _result()
    await outbox.save(result)
    await outbox.remove(result.attempt_id)
    await outbox.remove(result.attempt_id)
    assert await outbox.pending() == []
    assert read_pending(tmp_path) == []
    assert (tmp_path / LOG_NAME).stat().st_size == 0


async def test_a_short_log_keeps_its_tombstones(tmp_path: Path) -> None:
    """Below the restart size an emptied log is not truncated (a sync saved per result)."""
    outbox = Outbox(tmp_path)
    result = _result()
    await outbox.save(result)
    await outbox.remove(result.attempt_id)
    assert read_pending(tmp_path) == []
    assert (tmp_path / LOG_NAME).stat().st_size > 0


async def test_pending_is_in_write_order_and_a_save_again_moves_last(tmp_path: Path) -> None:
    """Results come back oldest write first; saving an attempt again makes it the newest."""
    outbox = Outbox(tmp_path)
    first, second = _result("first"), _result("second")
    await outbox.save(second)
    await outbox.save(first)
    assert _outputs(await outbox.pending()) == ["second", "first"]
    await outbox.save(second.model_copy(update={"output": "second again"}))
    assert _outputs(await outbox.pending()) == ["first", "second again"]
    assert _outputs(read_pending(tmp_path)) == ["first", "second again"]


async def test_one_log_file_and_no_leftovers(tmp_path: Path) -> None:
    """Saving and removing leave only the log in the folder."""
    outbox = Outbox(tmp_path)
    kept, dropped = _result("kept"), _result("dropped")
    await asyncio.gather(outbox.save(kept), outbox.save(dropped))
    await outbox.remove(dropped.attempt_id)
    assert _names(tmp_path) == [LOG_NAME]
    assert read_pending(tmp_path) == [kept]


async def test_a_torn_tail_is_cut_off_and_set_aside(tmp_path: Path) -> None:
    """A crash in the middle of an append loses only that record; later appends still read."""
    outbox = Outbox(tmp_path)
    whole = _result("whole")
    await outbox.save(whole)
    outbox.close()
    log_file = tmp_path / LOG_NAME
    good = log_file.stat().st_size
    torn = outbox_module._record(outbox_module._SAVE, uuid.uuid4(), b'{"attempt_id": "x')
    with log_file.open("ab") as handle:
        handle.write(torn[: len(torn) // 2])
    reopened = Outbox(tmp_path)
    assert await reopened.pending() == [whole]
    assert log_file.stat().st_size == good
    assert (tmp_path / CORRUPT_NAME).read_bytes() == torn[: len(torn) // 2]
    later = _result("later")
    await reopened.save(later)
    assert read_pending(tmp_path) == [whole, later]


async def test_records_after_a_damaged_one_are_set_aside_not_dropped(tmp_path: Path) -> None:
    """A record whose checksum fails ends the log; it and what follows go to the side file."""
    outbox = Outbox(tmp_path)
    first, second, third = _result("first"), _result("second"), _result("third")
    for result in (first, second, third):
        await outbox.save(result)
    outbox.close()
    log_file = tmp_path / LOG_NAME
    data = bytearray(log_file.read_bytes())
    at = data.index(b'"second"')
    data[at + 1] ^= 0xFF  # flip bits inside the second record's JSON
    log_file.write_bytes(bytes(data))
    assert await Outbox(tmp_path).pending() == [first]
    aside = (tmp_path / CORRUPT_NAME).read_bytes()
    assert b"third" in aside
    assert third.attempt_id.bytes in aside


async def test_an_unreadable_result_is_set_aside_once(tmp_path: Path) -> None:
    """A whole record this version cannot parse is kept aside, not re-sent, and not twice."""
    log_file = tmp_path / LOG_NAME
    good = _result("good")
    log_file.write_bytes(
        outbox_module._record(outbox_module._SAVE, uuid.uuid4(), b"{not json")
        + outbox_module._record(outbox_module._SAVE, good.attempt_id,
                                good.model_dump_json().encode()))
    assert await Outbox(tmp_path).pending() == [good]
    assert await Outbox(tmp_path).pending() == [good]
    assert (tmp_path / CORRUPT_NAME).read_bytes() == b"{not json\n"


async def test_result_files_of_the_old_layout_move_into_the_log(tmp_path: Path) -> None:
    """`<attempt>.json` files an older worker left are re-sent from the log; junk is kept."""
    old = _result("from the old layout")
    (tmp_path / f"{old.attempt_id}.json").write_text(old.model_dump_json())
    (tmp_path / f"{uuid.uuid4()}.json").write_text("{not json")
    assert await Outbox(tmp_path).pending() == [old]
    assert read_pending(tmp_path) == [old]
    assert not _names(tmp_path, "*.json")
    assert len(_names(tmp_path, "*.corrupt")) == 1


async def test_missing_folder_has_nothing_pending(tmp_path: Path) -> None:
    """A worker that never buffered anything has an empty outbox, and no folder is made."""
    assert await Outbox(tmp_path / "absent").pending() == []
    assert read_pending(tmp_path / "absent") == []
    assert not (tmp_path / "absent").exists()


async def test_concurrent_saves_are_each_durable_and_pending(tmp_path: Path) -> None:
    """Saves made at once (one group commit) all land, and so do removals made at once."""
    outbox = Outbox(tmp_path)
    results = [_result(f"r{i}") for i in range(40)]
    await asyncio.gather(*(outbox.save(r) for r in results))
    assert sorted(_outputs(read_pending(tmp_path))) == sorted(_outputs(results))
    await asyncio.gather(*(outbox.remove(r.attempt_id) for r in results[:30]))
    assert sorted(_outputs(read_pending(tmp_path))) == sorted(_outputs(results[30:]))
    assert sorted(_outputs(await outbox.pending())) == sorted(_outputs(results[30:]))


async def test_superseded_records_are_compacted_away(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the size limit, the live records are copied into a new, smaller log."""
    monkeypatch.setattr(outbox_module, "COMPACT_BYTES", 2_000)
    outbox = Outbox(tmp_path)
    keep = _result("keep")
    await outbox.save(keep)
    churn = [_result("x" * 200) for _ in range(30)]
    await asyncio.gather(*(outbox.save(r) for r in churn))
    grown = (tmp_path / LOG_NAME).stat().st_size
    await asyncio.gather(*(outbox.remove(r.attempt_id) for r in churn))
    assert (tmp_path / LOG_NAME).stat().st_size < grown // 4
    after = _result("after compaction")
    await outbox.save(after)
    assert await outbox.pending() == [keep, after]
    assert read_pending(tmp_path) == [keep, after]
    assert _names(tmp_path) == [LOG_NAME]


async def test_a_failed_save_is_raised_to_its_caller(tmp_path: Path) -> None:
    """A batch that cannot be written fails every save in it, loudly."""
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    outbox = Outbox(blocker / "outbox")
    with pytest.raises(NotADirectoryError):
        await outbox.save(_result())
