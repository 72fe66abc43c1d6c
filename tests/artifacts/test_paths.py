"""Safe relative paths: unsafe names are refused with a reason, safe ones normalised."""

from __future__ import annotations

from pathlib import Path

import pytest

from shoal.artifacts.paths import (
    MAX_PART_LENGTH,
    MAX_PATH_LENGTH,
    check_relative_path,
    resolve_inside,
)
from shoal.errors import UnsafePath


@pytest.mark.parametrize("path", ["/etc/passwd", "//server/share", "~/notes.txt", "~"])
def test_absolute_path_is_refused(path: str) -> None:
    """Absolute and home-relative paths are refused."""
    with pytest.raises(UnsafePath, match="absolute"):
        check_relative_path(path)


@pytest.mark.parametrize("path", ["..", "../x", "a/../../x", "a/b/../c", "a/.."])
def test_parent_climbing_is_refused(path: str) -> None:
    """Any `..` part is refused, even one that would stay inside."""
    with pytest.raises(UnsafePath, match=r"'\.\.'"):
        check_relative_path(path)


def test_nul_is_refused() -> None:
    """A NUL byte in a path is refused."""
    with pytest.raises(UnsafePath, match="control characters"):
        check_relative_path("a\x00.txt")


@pytest.mark.parametrize("char", ["\n", "\r", "\t", "\x1b", "\x7f"])
def test_control_characters_are_refused(char: str) -> None:
    """Control characters (newline, escape, DEL, …) are refused."""
    with pytest.raises(UnsafePath, match="control characters"):
        check_relative_path(f"a{char}b.txt")


@pytest.mark.parametrize("path", ["a\\b.txt", "..\\..\\x", "C:\\x"])
def test_backslash_is_refused(path: str) -> None:
    """Backslashes are refused rather than read as separators."""
    with pytest.raises(UnsafePath, match="backslash"):
        check_relative_path(path)


def test_too_long_path_is_refused() -> None:
    """A path longer than the limit is refused, and the message does not echo all of it."""
    path = "a/" * (MAX_PATH_LENGTH // 2) + "x"
    with pytest.raises(UnsafePath, match="longer") as caught:
        check_relative_path(path)
    assert len(caught.value.details["path"]) < 100


def test_too_long_part_is_refused() -> None:
    """One path part longer than a file system allows is refused."""
    with pytest.raises(UnsafePath, match="too long"):
        check_relative_path("x" * (MAX_PART_LENGTH + 1))


@pytest.mark.parametrize("path", ["", "   ", ".", "./", "./."])
def test_empty_path_is_refused(path: str) -> None:
    """A path that names no file is refused."""
    with pytest.raises(UnsafePath):
        check_relative_path(path)


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("src/app/main.py", "src/app/main.py"),
        ("./src//app/./main.py", "src/app/main.py"),
        ("README.md", "README.md"),
        ("dir/", "dir"),
        ("名前/ファイル.txt", "名前/ファイル.txt"),
        ("a..b/c...d", "a..b/c...d"),
    ],
)
def test_safe_nested_path_is_accepted(path: str, expected: str) -> None:
    """Safe relative paths are accepted in normalised POSIX form."""
    assert check_relative_path(path) == expected


def test_resolve_inside_accepts_a_nested_path(tmp_path: Path) -> None:
    """A safe path resolves to a location under the root."""
    assert resolve_inside(tmp_path, "a/b/c.txt") == tmp_path.resolve() / "a" / "b" / "c.txt"


def test_resolve_inside_refuses_a_symlink_escape(tmp_path: Path) -> None:
    """A path through a symlink pointing outside the root is refused."""
    root = tmp_path / "root"
    outside = tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "link").symlink_to(outside, target_is_directory=True)
    with pytest.raises(UnsafePath, match="outside"):
        resolve_inside(root, "link/secret.txt")


def test_resolve_inside_allows_a_symlink_that_stays_inside(tmp_path: Path) -> None:
    """A symlink to another folder under the root is fine."""
    (tmp_path / "real").mkdir()
    (tmp_path / "alias").symlink_to(tmp_path / "real", target_is_directory=True)
    assert resolve_inside(tmp_path, "alias/x.txt") == tmp_path.resolve() / "real" / "x.txt"


def test_resolve_inside_checks_the_path_first(tmp_path: Path) -> None:
    """`resolve_inside` refuses what `check_relative_path` refuses."""
    with pytest.raises(UnsafePath, match=r"'\.\.'"):
        resolve_inside(tmp_path, "../x")
