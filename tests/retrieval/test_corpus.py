"""A corpus of several sources: BM25 over one table of all their passages, and their vectors
stacked into one matrix, each row keyed back to its source's passage."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest

from shoal.artifacts.sources import SourceKind
from shoal.demo.fake.server import running_fake_server
from shoal.demo.model import create_demo_model_app
from shoal.retrieval import index as indexes
from shoal.retrieval.corpus import Corpus, nearest
from shoal.retrieval.embeddings import EmbeddingApi, EmbeddingClient
from shoal.retrieval.search import search_passages
from tests.retrieval.samples import FERRY_FACT, filler, write_documents


@pytest.fixture
async def embedder() -> AsyncIterator[EmbeddingClient]:
    async with running_fake_server(create_demo_model_app()) as root:
        yield EmbeddingClient(api=EmbeddingApi.ollama, base_url=root, model="embed-demo")


async def test_bm25_weighs_words_over_all_the_sources_together(tmp_path: Path) -> None:
    """A word that is in every passage of one source (its subject) still counts: weighed
    source by source it would count for nothing there, and a chance mention elsewhere would
    win."""
    history = tmp_path / "history.md"
    history.write_text("\n\n".join(
        [f"## Part {n}\n\nThe lighthouse {filler(n, 9)}" for n in range(6)]
        + [f"## Origins\n\nThe lighthouse was built in 1874. {filler(20, 8)}"]))
    notes = tmp_path / "notes.md"
    notes.write_text("\n\n".join(
        [f"## Note {n}\n\n{filler(30 + n, 9)}" for n in range(12)]
        + [f"## Trip\n\nWe saw a lighthouse from the ferry. {filler(50, 8)}"]))
    built = [await indexes.build(p, kind=SourceKind.markdown, index_dir=tmp_path / "index")
             for p in (history, notes)]
    one_by_one = sorted(((score, index.document) for index in built
                         for _, score in index.bm25('"lighthouse" OR "built"', 5)),
                        reverse=True)
    corpus = await Corpus.open(built)
    result = await search_passages(corpus, "lighthouse built")
    assert one_by_one[0][1] == "notes.md"  # what merging separate indexes would answer
    assert result.passages[0].chunk.citation.heading == "Origins"
    corpus.close()
    for index in built:
        index.close()


async def test_vectors_of_every_source_are_one_matrix_keyed_to_passages(
        tmp_path: Path, embedder: EmbeddingClient) -> None:
    """The stacked matrix has a row per passage of every source, and the nearest row to a
    passage's own vector is that passage."""
    files = write_documents(tmp_path / "sources")
    kinds = {"guide.md": SourceKind.markdown, "history.pdf": SourceKind.pdf}
    built = [await indexes.build(p, kind=kinds[n], index_dir=tmp_path / "index")
             for n, p in files.items()]
    corpus = await Corpus.open(built)
    await indexes.embed(built[0], embedder)
    assert corpus.missing_vectors(embedder.key) == ["history.pdf"]
    await indexes.embed(built[1], embedder)
    loaded = corpus.vectors(embedder.key)
    assert loaded is not None
    keys, matrix = loaded
    assert len(keys) == matrix.shape[0] == sum(i.chunk_count() for i in built)
    assert {n for n, _ in keys} == {0, 1}
    ferry = next(key for key, chunk in corpus.chunks(keys).items() if FERRY_FACT in chunk.text)
    vector = (await embedder.embed([corpus.chunks([ferry])[ferry].text]))[0]
    assert keys[nearest(matrix, vector, 3)[0]] == ferry
    assert np.allclose(np.linalg.norm(matrix, axis=1), 1.0, atol=1e-5)
    assert corpus.missing_vectors(embedder.key) == []
    corpus.close()
    for index in built:
        index.close()
