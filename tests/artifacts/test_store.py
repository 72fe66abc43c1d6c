"""Content-addressed storage, file validation and zip export."""

from __future__ import annotations

import asyncio
import hashlib
import zipfile
from pathlib import Path

import pytest

from shoal.artifacts.store import (
    ArtifactStore,
    ManifestEntry,
    RejectedFile,
    validate_files,
    write_zip,
)
from shoal.errors import InvalidInput, NotFound, UnsafePath

LIMITS = {"max_files": 10, "max_file_bytes": 100, "max_total_bytes": 1000}


@pytest.fixture
def store(tmp_path: Path) -> ArtifactStore:
    """A store in a fresh directory."""
    return ArtifactStore(tmp_path / "artifacts")


def sha(data: bytes) -> str:
    """The SHA-256 hex digest of `data`."""
    return hashlib.sha256(data).hexdigest()


def listing(folder: Path) -> list[str]:
    """The names in `folder`, sorted."""
    return sorted(path.name for path in folder.iterdir())


async def test_put_returns_the_sha256_and_read_returns_the_bytes(store: ArtifactStore) -> None:
    """Stored bytes come back unchanged under their SHA-256."""
    digest = await store.put(b"hello")
    assert digest == sha(b"hello")
    assert await store.read(digest) == b"hello"


async def test_objects_live_under_a_two_character_fan_out(store: ArtifactStore) -> None:
    """An object is stored at objects/ab/cdef…."""
    digest = await store.put(b"data")
    assert store.path_of(digest) == store.root / "objects" / digest[:2] / digest[2:]
    assert store.path_of(digest).read_bytes() == b"data"


async def test_put_is_idempotent(store: ArtifactStore) -> None:
    """Storing the same bytes twice, even at once, leaves one object and no temp files."""
    digests = await asyncio.gather(*(store.put(b"same") for _ in range(5)))
    assert set(digests) == {sha(b"same")}
    assert listing(store.root / "objects") == [sha(b"same")[:2]]
    assert listing(store.root / "objects" / sha(b"same")[:2]) == [sha(b"same")[2:]]
    assert listing(store.root / "tmp") == []


async def test_empty_content_is_storable(store: ArtifactStore) -> None:
    """An empty file is a valid object."""
    digest = await store.put(b"")
    assert await store.read(digest) == b""


async def test_read_of_a_missing_object_is_not_found(store: ArtifactStore) -> None:
    """Reading an unknown digest raises `NotFound`."""
    with pytest.raises(NotFound):
        await store.read(sha(b"never stored"))


@pytest.mark.parametrize("digest", ["../../etc/passwd", "ABC", "a" * 63, "A" * 64, "g" * 64])
async def test_malformed_digest_is_not_found(store: ArtifactStore, digest: str) -> None:
    """A string that is not a lowercase SHA-256 never becomes a path."""
    with pytest.raises(NotFound):
        store.path_of(digest)
    with pytest.raises(NotFound):
        await store.read(digest)
    assert not await store.exists(digest)


async def test_exists_tells_stored_from_unknown(store: ArtifactStore) -> None:
    """`exists` is true only for stored objects."""
    digest = await store.put(b"x")
    assert await store.exists(digest)
    assert not await store.exists(sha(b"y"))


async def test_put_files_returns_a_manifest_in_order(store: ArtifactStore) -> None:
    """Each stored file gets a manifest entry with its path, size and digest."""
    manifest = await store.put_files([("b.txt", b"bb"), ("a/c.txt", b"c")])
    assert manifest == [
        ManifestEntry(path="b.txt", size=2, sha256=sha(b"bb")),
        ManifestEntry(path="a/c.txt", size=1, sha256=sha(b"c")),
    ]


def test_validate_accepts_safe_files_in_normalised_form() -> None:
    """Safe files pass, with their paths normalised and their order kept."""
    accepted, rejected = validate_files([("./src//a.py", b"1"), ("b.md", b"2")], **LIMITS)
    assert accepted == [("src/a.py", b"1"), ("b.md", b"2")]
    assert rejected == []


def test_validate_rejects_unsafe_paths_with_the_reason() -> None:
    """An unsafe path is reported as sent, with the reason, not rewritten."""
    accepted, rejected = validate_files([("../x", b"1"), ("ok.txt", b"2")], **LIMITS)
    assert accepted == [("ok.txt", b"2")]
    assert len(rejected) == 1
    assert rejected[0].path == "../x"
    assert "'..'" in rejected[0].reason


def test_validate_rejects_duplicates_after_normalisation() -> None:
    """Two names for the same path: the first wins, the second is rejected."""
    accepted, rejected = validate_files([("a/b.txt", b"1"), ("a//b.txt", b"2")], **LIMITS)
    assert accepted == [("a/b.txt", b"1")]
    assert rejected == [RejectedFile("a//b.txt", "Another file already has the path 'a/b.txt'.")]


def test_validate_rejects_a_file_clashing_with_a_folder() -> None:
    """A file cannot also be a folder of another file, in either order."""
    files = [("a", b"1"), ("a/b.txt", b"2"), ("c/d.txt", b"3"), ("c", b"4")]
    accepted, rejected = validate_files(files, **LIMITS)
    assert accepted == [("a", b"1"), ("c/d.txt", b"3")]
    assert [r.path for r in rejected] == ["a/b.txt", "c"]


def test_validate_rejects_a_file_over_the_size_limit() -> None:
    """A file bigger than the per-file limit is rejected with both sizes named."""
    accepted, rejected = validate_files([("big", b"x" * 101), ("small", b"x")], **LIMITS)
    assert accepted == [("small", b"x")]
    assert rejected[0].path == "big"
    assert "101" in rejected[0].reason
    assert "100" in rejected[0].reason


def test_validate_rejects_files_past_the_count_limit() -> None:
    """Only the first `max_files` acceptable files are kept."""
    files = [(f"f{i}", b"x") for i in range(12)]
    accepted, rejected = validate_files(files, **LIMITS)
    assert [path for path, _ in accepted] == [f"f{i}" for i in range(10)]
    assert [r.path for r in rejected] == ["f10", "f11"]
    assert "10" in rejected[0].reason


def test_validate_rejects_files_past_the_total_limit() -> None:
    """A file that would push the total past the limit is rejected; smaller ones still fit."""
    limits = {**LIMITS, "max_total_bytes": 150}
    files = [("a", b"x" * 100), ("b", b"x" * 60), ("c", b"x" * 50)]
    accepted, rejected = validate_files(files, **limits)
    assert [path for path, _ in accepted] == ["a", "c"]
    assert [r.path for r in rejected] == ["b"]
    assert "150" in rejected[0].reason


async def test_write_zip_holds_every_member(store: ArtifactStore, tmp_path: Path) -> None:
    """The archive holds each member under its path with its stored bytes."""
    one, two = await store.put(b"one"), await store.put(b"two" * 1000)
    dest = tmp_path / "out" / "files.zip"
    await write_zip(dest, [("src/one.txt", one), ("two.txt", two), ("copy.txt", one)], store)
    with zipfile.ZipFile(dest) as archive:
        assert archive.namelist() == ["src/one.txt", "two.txt", "copy.txt"]
        assert archive.read("src/one.txt") == b"one"
        assert archive.read("two.txt") == b"two" * 1000
        assert archive.read("copy.txt") == b"one"
        assert archive.testzip() is None


async def test_write_zip_is_reproducible(store: ArtifactStore, tmp_path: Path) -> None:
    """The same members zip to the same bytes."""
    digest = await store.put(b"content")
    await write_zip(tmp_path / "a.zip", [("x.txt", digest)], store)
    await write_zip(tmp_path / "b.zip", [("x.txt", digest)], store)
    assert (tmp_path / "a.zip").read_bytes() == (tmp_path / "b.zip").read_bytes()


@pytest.mark.parametrize("name", ["../evil.txt", "/abs.txt", "a\\b.txt", "nul\x00.txt"])
async def test_write_zip_refuses_unsafe_archive_paths(
    store: ArtifactStore, tmp_path: Path, name: str
) -> None:
    """An unsafe archive path raises and writes nothing."""
    digest = await store.put(b"x")
    with pytest.raises(UnsafePath):
        await write_zip(tmp_path / "out.zip", [(name, digest)], store)
    assert listing(tmp_path) == ["artifacts"]


async def test_write_zip_refuses_a_repeated_path(store: ArtifactStore, tmp_path: Path) -> None:
    """Two members under one archive path raise instead of shadowing each other."""
    digest = await store.put(b"x")
    with pytest.raises(InvalidInput, match=r"a\.txt"):
        await write_zip(tmp_path / "out.zip", [("a.txt", digest), ("./a.txt", digest)], store)


async def test_write_zip_with_a_missing_object_leaves_no_file(
    store: ArtifactStore, tmp_path: Path
) -> None:
    """A member not in the store raises `NotFound`, and no partial archive is left behind."""
    present = await store.put(b"here")
    members = [("here.txt", present), ("gone.txt", sha(b"gone"))]
    with pytest.raises(NotFound):
        await write_zip(tmp_path / "out.zip", members, store)
    assert listing(tmp_path) == ["artifacts"]
