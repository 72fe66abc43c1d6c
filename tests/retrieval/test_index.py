"""Index files: one per source content hash, built once (even by two builders at once) and
reused under any name; embeddings added once per model, from the fake model server."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from starlette.applications import Starlette

from shoal.artifacts.sources import SourceKind
from shoal.demo.fake.exchange import request_log
from shoal.demo.model import create_demo_model_app, running_demo_model
from shoal.errors import NotFound
from shoal.retrieval import index as indexes
from shoal.retrieval.embeddings import EmbeddingApi, EmbeddingClient
from tests.retrieval.samples import FERRY_FACT, guide_markdown


@pytest.fixture
def guide(tmp_path: Path) -> Path:
    path = tmp_path / "sources" / "guide.md"
    path.parent.mkdir()
    path.write_text(guide_markdown(), encoding="utf-8")
    return path


@pytest.fixture
def app() -> Starlette:
    return create_demo_model_app()


@pytest.fixture
async def embedder(app: Starlette) -> AsyncIterator[EmbeddingClient]:
    async with running_demo_model(app) as base_url:
        yield EmbeddingClient(api=EmbeddingApi.openai, base_url=base_url, model="embed-demo")


async def test_an_index_is_built_once_per_content_and_reused(guide: Path,
                                                             tmp_path: Path) -> None:
    """A second build of the same file, or of a copy under another name, opens the first
    index: one file, untouched, and passages cited by the name given now."""
    where = tmp_path / "index"
    first = await indexes.build(guide, kind=SourceKind.markdown, index_dir=where)
    written = first.path.stat().st_mtime_ns
    copy = tmp_path / "ferry-guide.md"
    shutil.copy(guide, copy)
    again = await indexes.build(guide, kind=SourceKind.markdown, index_dir=where)
    renamed = await indexes.build(copy, kind=SourceKind.markdown, index_dir=where)
    assert (first.built, again.built, renamed.built) == (True, False, False)
    assert first.path == renamed.path == indexes.index_path(where, indexes.content_hash(guide))
    assert first.path.stat().st_mtime_ns == written
    assert [p.name for p in where.glob("*.sqlite")] == [first.path.name]
    hit = renamed.chunks([renamed.bm25('"gull" OR "island"', 1)[0][0]])
    assert {c.citation.document for c in hit.values()} == {"ferry-guide.md"}
    for index in (first, again, renamed):
        index.close()


async def test_two_builders_at_once_build_it_once(guide: Path, tmp_path: Path) -> None:
    """Concurrent builds of one source (as two attempts would) build one index between them."""
    where = tmp_path / "index"
    opened = await asyncio.gather(*(indexes.build(guide, kind=SourceKind.markdown,
                                                  index_dir=where) for _ in range(4)))
    assert sorted(i.built for i in opened) == [False, False, False, True]
    assert len({i.chunk_count() for i in opened}) == 1
    assert not list(where.glob(".*.tmp"))  # no scratch file is left behind
    for index in opened:
        index.close()


async def test_changed_content_gets_an_index_of_its_own(guide: Path, tmp_path: Path) -> None:
    """Editing the file changes its hash, so the next build makes a new index."""
    where = tmp_path / "index"
    before = await indexes.build(guide, kind=SourceKind.markdown, index_dir=where)
    await asyncio.to_thread(guide.write_text,
                            guide_markdown() + "\n## Lost property\n\nAsk at the kiosk.\n")
    after = await indexes.build(guide, kind=SourceKind.markdown, index_dir=where)
    assert after.built
    assert after.path != before.path
    assert after.chunk_count() == before.chunk_count() + 1
    before.close()
    after.close()


def test_opening_a_missing_index_is_not_found(tmp_path: Path) -> None:
    """`open` of content never indexed says to build it first."""
    with pytest.raises(NotFound, match="Build it first"):
        indexes.open(tmp_path, "0" * 64, document="guide.md")


async def test_embeddings_are_added_once_per_model(guide: Path, tmp_path: Path,
                                                   embedder: EmbeddingClient,
                                                   app: Starlette) -> None:
    """The first `embed` asks the model for every passage; later ones, even from another
    opening of the file, ask nothing."""
    where = tmp_path / "index"
    index = await indexes.build(guide, kind=SourceKind.markdown, index_dir=where)
    assert await indexes.embed(index, embedder) is True
    requests = len(request_log(app))
    reopened = indexes.open(where, index.sha256, document="guide.md")
    assert await indexes.embed(reopened, embedder) is False
    assert len(request_log(app)) == requests
    loaded = reopened.vectors(embedder.key)
    assert loaded is not None
    ids, matrix = loaded
    assert matrix.shape == (index.chunk_count(), 256)
    assert reopened.models() == [embedder.key]
    assert FERRY_FACT in "".join(c.text for c in reopened.chunks(list(map(int, ids))).values())
    index.close()
    reopened.close()
