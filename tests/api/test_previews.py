"""A produced file made readable: highlighted by its name, binary and oversized files
described instead, and the diff between two versions highlighted (or empty when unchanged)."""

from __future__ import annotations

from shoal.api import previews


def test_a_python_file_is_highlighted_and_escaped() -> None:
    shown = previews.render("calc.py", b"def add(a, b):\n    return a + b  # <b>sum</b>\n")
    assert shown.language == "Python"
    assert shown.html is not None
    assert shown.note is None
    assert '<span class="hl-k">def</span>' in shown.html
    assert "&lt;b&gt;sum&lt;/b&gt;" in shown.html
    assert "<b>" not in shown.html


def test_an_unknown_kind_of_file_is_plain_text() -> None:
    shown = previews.render("notes.unknownext", b"a < b\n")
    assert (shown.language, shown.html) == ("Text only", "a &lt; b\n")


def test_binary_and_oversized_files_are_described_not_shown() -> None:
    binary = previews.render("image.png", b"\x89PNG\r\n\x1a\n\x00\x00")
    assert binary.html is None
    assert binary.note == "A binary file (10 bytes)."
    latin1 = previews.render("old.txt", "café".encode("latin-1"))
    assert latin1.html is None
    assert "binary" in (latin1.note or "")
    big = previews.render("big.txt", b"x" * (previews.MAX_PREVIEW + 1))
    assert big.html is None
    assert "Too large" in (big.note or "")


def test_the_diff_marks_removed_and_added_lines() -> None:
    changed = previews.diff("calc.py", b"a = 1\nb = 2\n", b"a = 1\nb = 3")
    assert changed is not None
    assert '<span class="hl-gd">-b = 2</span>' in changed
    assert '<span class="hl-gi">+b = 3</span>' in changed  # a last line without a newline
    assert "previous/calc.py" in changed
    assert "latest/calc.py" in changed


def test_an_unchanged_file_has_an_empty_diff_and_binary_has_none() -> None:
    assert previews.diff("a.txt", b"same\n", b"same\n") == ""
    assert previews.diff("a.bin", b"\x00", b"\x01") is None
    assert previews.diff("a.txt", b"", b"x" * (previews.MAX_PREVIEW + 1)) is None
