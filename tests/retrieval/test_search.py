"""Search over real indexes of a Markdown guide and a PDF: hybrid with the fake model server's
embeddings (both protocols), BM25 alone without them, and the result saying which ran."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from shoal.artifacts.sources import SourceKind
from shoal.demo.fake.server import running_fake_server
from shoal.demo.model import create_demo_model_app
from shoal.retrieval import index as indexes
from shoal.retrieval.corpus import Corpus
from shoal.retrieval.embeddings import NO_EMBEDDING_MODEL, EmbeddingApi, EmbeddingClient
from shoal.retrieval.search import SearchMode, fts_query, search_passages
from tests.retrieval.samples import BUILT_FACT, FARE_FACT, write_documents

KINDS = {"guide.md": SourceKind.markdown, "history.pdf": SourceKind.pdf}


@pytest.fixture
async def root() -> AsyncIterator[str]:
    async with running_fake_server(create_demo_model_app()) as url:
        yield url


@pytest.fixture
async def corpus(tmp_path: Path) -> AsyncIterator[Corpus]:
    files = write_documents(tmp_path / "sources")
    built = [await indexes.build(path, kind=KINDS[name], index_dir=tmp_path / "index")
             for name, path in files.items()]
    collection = await Corpus.open(built)
    yield collection
    collection.close()
    for index in built:
        index.close()


@pytest.mark.parametrize(("api", "suffix"), [(EmbeddingApi.openai, "/v1"),
                                             (EmbeddingApi.ollama, "")])
async def test_hybrid_search_finds_the_answer_and_says_hybrid(
        corpus: Corpus, root: str, api: EmbeddingApi, suffix: str) -> None:
    """With embeddings, the passage that answers comes first, cited with its PDF page, and
    both rankings had it."""
    embedder = EmbeddingClient(api=api, base_url=root + suffix, model="embed-demo")
    for index in corpus.indexes:
        await indexes.embed(index, embedder)
    result = await search_passages(corpus, "When was the lighthouse built, and by whom?",
                                   k=3, embedder=embedder)
    best = result.passages[0]
    assert result.mode is SearchMode.hybrid
    assert result.note == ""
    assert BUILT_FACT in best.chunk.text
    assert (best.chunk.citation.document, best.chunk.citation.page) == ("history.pdf", 2)
    assert best.bm25_rank is not None
    assert best.vector_rank is not None
    assert len(result.passages) == 3


async def test_bm25_alone_finds_the_answer_and_says_why(corpus: Corpus) -> None:
    """Without an embedding model, BM25 finds the passage and the result says so."""
    result = await search_passages(corpus, "How much does an adult ticket cost?", k=2)
    best = result.passages[0]
    assert result.mode is SearchMode.bm25
    assert result.note == NO_EMBEDDING_MODEL
    assert FARE_FACT in best.chunk.text
    assert (best.chunk.citation.document, best.chunk.citation.heading) == ("guide.md", "Fares")
    assert best.vector_rank is None


async def test_sources_without_vectors_for_the_model_fall_back_to_bm25(
        corpus: Corpus, root: str) -> None:
    """An embedder whose vectors the indexes lack gives BM25 alone, saying why."""
    embedder = EmbeddingClient(api=EmbeddingApi.openai, base_url=f"{root}/v1", model="other")
    result = await search_passages(corpus, "adult ticket", embedder=embedder)
    assert result.mode is SearchMode.bm25
    assert "no embeddings from openai:other" in result.note
    assert FARE_FACT in result.passages[0].chunk.text


async def test_a_query_that_cannot_be_embedded_falls_back_to_bm25(
        corpus: Corpus, root: str) -> None:
    """When the embeddings endpoint is gone at query time, search still answers, by BM25."""
    embedder = EmbeddingClient(api=EmbeddingApi.openai, base_url=f"{root}/v1", model="m")
    for index in corpus.indexes:
        await indexes.embed(index, embedder)
    gone = dataclasses.replace(embedder, base_url="http://127.0.0.1:9/v1", max_retries=0)
    result = await search_passages(corpus, "adult ticket", embedder=gone)
    assert result.mode is SearchMode.bm25
    assert "could not be embedded" in result.note
    assert FARE_FACT in result.passages[0].chunk.text


@pytest.mark.parametrize("query", ['"unbalanced', "NEAR(a b) OR", "a*b:c ^d", "-- ; DROP",
                                   "", "the of and"])
async def test_any_query_text_is_safe_for_fts5(corpus: Corpus, query: str) -> None:
    """Quotes, operators and punctuation in a question never break the FTS5 query."""
    result = await search_passages(corpus, query)
    assert result.mode is SearchMode.bm25


def test_the_fts_query_keeps_the_words_that_matter() -> None:
    """Stop words go (unless nothing else is left); each word is quoted once."""
    assert fts_query("When was the Lighthouse built? The lighthouse!") == (
        '"lighthouse" OR "built"')
    assert fts_query("the of") == '"the" OR "of"'
    assert fts_query("?!") is None

