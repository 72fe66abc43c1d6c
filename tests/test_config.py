"""Settings: task-claim timings are validated, and each process has one instance id."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from shoal.config import folder_instance_id
from tests.conftest import make_settings


def test_claim_interval_must_be_shorter_than_claim_ttl(tmp_path: Path) -> None:
    """A copy that renewed its claims no more often than they expire would lose them."""
    with pytest.raises(ValidationError, match="claim_ttl must be longer than claim_interval"):
        make_settings(tmp_path, claim_ttl=10, claim_interval=10)


def test_instance_id_is_one_per_process_unless_set(tmp_path: Path) -> None:
    """Settings built in one process share its generated id; an explicit id wins."""
    assert make_settings(tmp_path).instance_id == make_settings(tmp_path).instance_id
    assert make_settings(tmp_path, instance_id="pod-1").instance_id == "pod-1"


def test_folder_instance_id_is_stable_per_data_folder(tmp_path: Path) -> None:
    """`shoal up` keeps its id across restarts on one folder, and another folder gets another."""
    assert folder_instance_id(tmp_path / "a") == folder_instance_id(tmp_path / "a")
    assert folder_instance_id(tmp_path / "a") != folder_instance_id(tmp_path / "b")
