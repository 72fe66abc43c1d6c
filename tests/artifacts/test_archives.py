"""Zip uploads: unpacked flat into real files, and damaged, unsafe or bomb-like zips refused
without leaving anything behind."""

from __future__ import annotations

import os
import stat
import struct
import zipfile
from pathlib import Path

import pytest

from shoal.artifacts.archives import expand_zip
from shoal.artifacts.sources import SourceKind, sniff_file
from shoal.errors import InvalidInput
from tests.artifacts.test_sources import render_pdf

MB = 1 << 20


def _write(folder: Path, name: str, data: bytes) -> Path:
    path = folder / name
    path.write_bytes(data)
    return path


@pytest.fixture(scope="module")
def pdf_bytes() -> bytes:
    """A real two-page PDF with text, rendered by WeasyPrint."""
    return render_pdf()


def _zip(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


def _expand(path: Path, into: Path, **limits: float) -> list[tuple[str, Path]]:
    options = {"max_members": 10, "max_total_bytes": 50 * MB, "max_ratio": 100.0, **limits}
    return expand_zip(path, into, max_members=int(options["max_members"]),
                      max_total_bytes=int(options["max_total_bytes"]),
                      max_ratio=options["max_ratio"])


def _patch_central(data: bytes, index: int, offset: int, fmt: str, value: int) -> bytes:
    """Overwrite a field of the `index`-th central directory header."""
    at = -1
    for _ in range(index + 1):
        at = data.index(b"PK\x01\x02", at + 1)
    out = bytearray(data)
    struct.pack_into(fmt, out, at + offset, value)
    return bytes(out)


def test_a_zip_unpacks_flat_in_order(tmp_path: Path, pdf_bytes: bytes) -> None:
    """Members come back by their own names, folders (`/` or `\\`) flattened, macOS extras
    skipped."""
    path = _zip(tmp_path / "u.zip", {
        "docs/": b"", "docs/notes.md": b"# Notes", "data/rows.csv": b"a,b\n1,2\n",
        "report.pdf": pdf_bytes, "__MACOSX/docs/._notes.md": b"\x00\x05\x16\x07",
        "docs/.DS_Store": b"\x00\x00\x00\x01Bud1", "win\\page.html": b"<p>hi</p>"})
    into = tmp_path / "out"
    members = _expand(path, into)
    assert [name for name, _ in members] == ["notes.md", "rows.csv", "report.pdf", "page.html"]
    assert [sniff_file(p, n) for n, p in members] == [
        SourceKind.markdown, SourceKind.csv, SourceKind.pdf, SourceKind.html]
    assert members[2][1].read_bytes() == pdf_bytes
    assert sorted(p.name for p in into.iterdir()) == [
        "notes.md", "page.html", "report.pdf", "rows.csv"]


@pytest.mark.parametrize(("members", "match"), [
    ({"a/x.md": b"1", "b/x.md": b"2"}, "two files named 'x.md'"),
    ({"../evil.md": b"x"}, "'\\.\\.'"),
    ({"/etc/evil.md": b"x"}, "absolute"),
    ({"ok.md": b"x", "dir\\..\\..\\evil.md": b"x"}, "'\\.\\.'"),
    ({"bad\x01name.md": b"x"}, "control"),
    ({"inner.zip": b"PK\x05\x06" + bytes(18)}, "another zip"),
    ({"ok.md": b"fine", "inner.bin": b"PK\x03\x04 pretending"}, "another zip"),
    ({"docs/": b""}, "no files"),
    ({f"{i}.md": b"x" for i in range(11)}, "11 files; at most 10"),
])
def test_a_bad_zip_is_refused_and_leaves_nothing(tmp_path: Path, members: dict[str, bytes],
                                                match: str) -> None:
    """Duplicates, climbing, absolute or bad names, nested zips, emptiness and too many
    members are refused, and the folder made for the files is gone."""
    into = tmp_path / "out"
    with pytest.raises(InvalidInput, match=match):
        _expand(_zip(tmp_path / "bad.zip", members), into)
    assert not into.exists()


def test_a_symbolic_link_is_refused(tmp_path: Path) -> None:
    """A member stored as a symlink is refused, not unpacked as a file or a link."""
    path = tmp_path / "link.zip"
    with zipfile.ZipFile(path, "w") as zf:
        info = zipfile.ZipInfo("passwd.txt")
        info.external_attr = (stat.S_IFLNK | 0o777) << 16
        zf.writestr(info, "/etc/passwd")
    with pytest.raises(InvalidInput, match="symbolic link"):
        _expand(path, tmp_path / "out")


def test_an_encrypted_member_is_refused(tmp_path: Path) -> None:
    """A member flagged as password-protected is refused before any reading."""
    data = _zip(tmp_path / "z.zip", {"a.md": b"x"}).read_bytes()
    path = _write(tmp_path, "enc.zip", _patch_central(data, 0, 8, "<H", 0x1))
    with pytest.raises(InvalidInput, match="password"):
        _expand(path, tmp_path / "out")


def test_an_unusual_compression_method_is_refused(tmp_path: Path) -> None:
    """Only stored and deflated members are unpacked."""
    path = tmp_path / "bz.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_BZIP2) as zf:
        zf.writestr("a.md", "x" * 100)
    with pytest.raises(InvalidInput, match="compression method"):
        _expand(path, tmp_path / "out")


def test_a_file_that_is_not_a_zip_is_refused(tmp_path: Path) -> None:
    """Zip magic over garbage is refused as damaged."""
    path = _write(tmp_path, "fake.zip", b"PK\x03\x04" + os.urandom(500))
    with pytest.raises(InvalidInput, match="zip cannot be read"):
        _expand(path, tmp_path / "out")


@pytest.fixture(scope="module")
def bomb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A zip of 200 MB of zeros (about 200 KB compressed), and a small file before it."""
    path = tmp_path_factory.mktemp("bomb") / "bomb.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("first.md", "# innocent")
        with zf.open("zeros.txt", "w", force_zip64=True) as out:
            chunk = bytes(MB)
            for _ in range(200):
                out.write(chunk)
    return path


def test_a_zip_bomb_is_refused_by_its_total(bomb: Path, tmp_path: Path) -> None:
    """200 MB unpacked against a 50 MB limit: refused as an archive bomb."""
    assert bomb.stat().st_size < MB
    into = tmp_path / "out"
    with pytest.raises(InvalidInput, match="archive bomb"):
        _expand(bomb, into, max_ratio=10_000.0)
    assert not into.exists()


def test_a_zip_bomb_is_refused_by_its_ratio(bomb: Path, tmp_path: Path) -> None:
    """Within a generous total, a 1000:1 member is still refused for its ratio."""
    with pytest.raises(InvalidInput, match=r"archive bomb: .*\(limit 100:1\)"):
        _expand(bomb, tmp_path / "out", max_total_bytes=1 << 30)


def test_a_small_repetitive_file_is_not_a_bomb(tmp_path: Path) -> None:
    """Under 1 MiB, a file that compresses far past the ratio still unpacks."""
    path = _zip(tmp_path / "ok.zip", {"dashes.md": b"-" * 500_000})
    [(name, file)] = _expand(path, tmp_path / "out", max_ratio=10.0)
    assert name == "dashes.md"
    assert file.stat().st_size == 500_000


def test_overlapping_members_are_refused_as_a_bomb(tmp_path: Path) -> None:
    """A member whose header claims more compressed bytes than lie before the next member
    (as in overlapping-member bombs) is refused, though its ratio looks honest."""
    data = _zip(tmp_path / "z.zip", {"zeros.txt": bytes(5 * MB), "b.md": b"x"}).read_bytes()
    path = _write(tmp_path, "overlap.zip", _patch_central(data, 0, 20, "<I", 5 * MB))
    with pytest.raises(InvalidInput, match=r"archive bomb: .* overlaps"):
        _expand(path, tmp_path / "out", max_total_bytes=1 << 30)


def test_a_refusal_midway_removes_only_what_it_unpacked(tmp_path: Path) -> None:
    """A member whose header lies about its size fails after another was unpacked; the
    unpacked one is removed and what the folder held before stays."""
    data = _zip(tmp_path / "z.zip", {"first.md": b"# ok", "lies.txt": b"y" * 100_000})
    path = _write(tmp_path, "lies.zip", _patch_central(data.read_bytes(), 1, 24, "<I", 1000))
    into = tmp_path / "out"
    into.mkdir()
    (into / "keep.txt").write_text("mine")
    with pytest.raises(InvalidInput, match=r"'lies\.txt' cannot be unpacked"):
        _expand(path, into)
    assert [p.name for p in into.iterdir()] == ["keep.txt"]
