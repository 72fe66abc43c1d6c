"""Settings: task-claim timings are validated; the instance id is stable per data folder; the
trusted proxies are addresses or networks, never "*"."""

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


def test_instance_id_is_stable_per_host_and_data_folder_unless_set(tmp_path: Path) -> None:
    """A restarted copy keeps its id (and takes its tasks back at once); another data folder
    gets another id; an explicit id wins."""
    assert make_settings(tmp_path).instance_id == make_settings(tmp_path).instance_id
    assert make_settings(tmp_path).instance_id == folder_instance_id(tmp_path / "data")
    assert folder_instance_id(tmp_path / "a") != folder_instance_id(tmp_path / "b")
    assert make_settings(tmp_path, instance_id="pod-1").instance_id == "pod-1"


def test_trusted_proxies_are_addresses_or_networks(tmp_path: Path) -> None:
    """Comma-separated addresses and networks, normalised; empty trusts none; "*" and names
    are refused, naming what to write instead."""
    assert make_settings(tmp_path, trusted_proxies=" 10.0.0.5, 10.1.2.0/24 ,::1,").trusted_proxies \
        == "10.0.0.5,10.1.2.0/24,::1"
    assert make_settings(tmp_path, trusted_proxies="").trusted_proxies == ""
    assert make_settings(tmp_path).trusted_proxies == "127.0.0.1"
    for wrong in ("*", "lb", "10.0.0.300"):
        with pytest.raises(ValidationError, match="the load balancer's address"):
            make_settings(tmp_path, trusted_proxies=wrong)
