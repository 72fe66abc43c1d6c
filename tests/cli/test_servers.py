"""`shoal up` (what `make run` runs) and `shoal serve` on a port another program holds: one
sentence saying so and how to choose another, before anything has started."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from shoal.api.listen import bind_socket
from tests.cli.harness import finish, start


@pytest.fixture
def taken() -> Iterator[int]:
    """A port something listens on for the length of the test."""
    sock = bind_socket("127.0.0.1", 0)
    try:
        yield sock.getsockname()[1]
    finally:
        sock.close()


@pytest.mark.parametrize("command", ["up", "serve"])
def test_a_taken_port_is_said_in_one_sentence(taken: int, tmp_path: Path, command: str) -> None:
    """Exit 1 with the port, that it is taken and the option that chooses another; no
    traceback, and nothing started (no database, no key in the data folder)."""
    result = finish(start(tmp_path, command, "--port", str(taken)))
    assert result.returncode == 1, result.stdout + result.stderr
    said = (result.stdout + result.stderr).strip()
    assert said.startswith(f"Port {taken} on 127.0.0.1 is taken"), said
    assert f"Choose another port: shoal {command} --port " in said
    assert ("make run PORT=" in said) == (command == "up")
    assert len(said.splitlines()) == 1, said
    assert not result.data_dir.exists()
