"""`history_reads.py`: a user's past days and the day's tasks written as the engine leaves
them, and the reads across tasks timed on them (the daily budget's check, a copy's claims);
what the budget's check finds is the day's alone."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from history_reads import (
    checked,
    checkpoints_page,
    days_list,
    filled,
    listed,
    migrated,
    queue_read,
    renewed,
)


async def test_the_check_finds_the_days_spending_over_any_history(tmp_path: Path) -> None:
    """Two past days of three ended tasks and the day's two tasks (one still running), two
    attempts each of ten tokens: the check finds the day's 40 tokens; every read is timed."""
    async with migrated("sqlite", tmp_path) as db:
        user_id = await filled(db, days=2, per_day=3, today=2, attempts_each=2)
        p50, p90, found = await checked(db, user_id, checks=3)
        others = [await renewed(db, checks=3), await listed(db, user_id, checks=3),
                  await queue_read(db, user_id, checks=3),
                  await checkpoints_page(db, user_id, checks=3)]
    assert found == (40, pytest.approx(0.004))
    assert 0 < p50 <= p90
    assert all(0 < median <= p90 for median, p90 in others)


def test_days_are_whole_numbers_of_zero_or_more() -> None:
    assert days_list("0,1,5") == [0, 1, 5]
    for bad in ("1,x", "-1"):
        with pytest.raises(argparse.ArgumentTypeError):
            days_list(bad)
