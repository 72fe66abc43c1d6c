"""Hybrid search over a task's sources: BM25 and vectors, fused by reciprocal rank.

`search_passages(corpus, query, k=…, embedder=…)`:

1. BM25: the query's words (stop words dropped, each quoted, OR-ed) against the corpus's FTS5
   table (`shoal.retrieval.corpus`: one table over all its sources).
2. Vectors, when an embedder is given and the indexes hold its vectors: the query's embedding
   against every passage's by exact cosine similarity, one matrix product over the corpus
   (about a millisecond at 10k passages; `benchmarks/bench_retrieval.py`).
3. Reciprocal rank fusion: a passage scores `sum(1 / (RRF_K + rank))` over the two rankings.

Without an embedder, without vectors for it, or when the query cannot be embedded, the result
is BM25 alone, and `SearchResult.mode` and `note` say so and why.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from enum import StrEnum

from shoal.errors import ShoalError
from shoal.retrieval.chunks import Chunk
from shoal.retrieval.corpus import Corpus, Key, nearest
from shoal.retrieval.embeddings import NO_EMBEDDING_MODEL, Embedder

RRF_K = 60
"""Reciprocal rank fusion's constant (Cormack et al., 2009): large enough that the first few
ranks of either list count about the same."""

CANDIDATES = 50
"""How many passages each ranking contributes to the fusion."""

MAX_QUERY_TERMS = 32

_WORD = re.compile(r"\w+")
STOP_WORDS = frozenset({
    "a", "an", "and", "are", "as", "at", "be", "by", "can", "could", "did", "do", "does", "for",
    "from", "had", "has", "have", "how", "i", "in", "is", "it", "its", "me", "my", "of", "on",
    "or", "our", "she", "should", "so", "than", "that", "the", "their", "them", "then", "there",
    "these", "they", "this", "to", "was", "we", "were", "what", "when", "where", "which", "who",
    "whom", "why", "will", "with", "would", "you", "your"})


class SearchMode(StrEnum):
    """What found the passages: both rankings fused, or BM25 alone."""

    hybrid = "hybrid"
    bm25 = "bm25"


@dataclass(frozen=True, slots=True)
class Hit:
    """One passage found, its score, and its rank in each ranking (None: not in it)."""

    chunk: Chunk
    score: float
    bm25_rank: int | None
    vector_rank: int | None


@dataclass(frozen=True, slots=True)
class SearchResult:
    """The passages found for `query`, best first; `note` says what was searched without
    vectors, and why (empty when everything was searched both ways)."""

    query: str
    mode: SearchMode
    passages: tuple[Hit, ...]
    note: str = ""


def fts_query(text: str) -> str | None:
    """`text` as an FTS5 query that any of its words matches (stop words dropped unless they
    are all there is), or None when it has no words."""
    words = list(dict.fromkeys(w.lower() for w in _WORD.findall(text)))
    kept = [w for w in words if w not in STOP_WORDS] or words
    if not kept:
        return None
    return " OR ".join(f'"{w}"' for w in kept[:MAX_QUERY_TERMS])


async def search_passages(corpus: Corpus, query: str, *, k: int = 5,
                          embedder: Embedder | None = None,
                          candidates: int = CANDIDATES) -> SearchResult:
    """The `k` best passages of `corpus` for `query`."""
    pool = max(candidates, k)
    match = fts_query(query)
    lexical = await asyncio.to_thread(corpus.bm25, match, pool) if match else []
    semantic, note = await _vector_ranking(corpus, query, pool, embedder)
    scored: list[tuple[Key, float, int | None, int | None]]
    if semantic is None:
        scored = [(key, score, rank, None) for rank, (key, score) in enumerate(lexical[:k], 1)]
        mode = SearchMode.bm25
    else:
        scored = _fused(lexical, semantic)[:k]
        mode = SearchMode.hybrid
    chunks = await asyncio.to_thread(corpus.chunks, [key for key, *_ in scored])
    passages = tuple(Hit(chunks[key], score, bm25_rank, vector_rank)
                     for key, score, bm25_rank, vector_rank in scored if key in chunks)
    return SearchResult(query, mode, passages, note)


async def _vector_ranking(corpus: Corpus, query: str, pool: int,
                          embedder: Embedder | None) -> tuple[list[Key] | None, str]:
    """The passages nearest the query's embedding, or None and the reason there are none."""
    if embedder is None:
        return None, NO_EMBEDDING_MODEL
    loaded = await asyncio.to_thread(corpus.vectors, embedder.key)
    if loaded is None:
        return None, (f"The sources have no embeddings from {embedder.key} (they could not be "
                      "made when they were indexed), so passages are found by BM25 alone.")
    try:
        vector = (await embedder.embed([query]))[0]
    except ShoalError as exc:
        return None, (f"The query could not be embedded ({exc.message}), so passages are "
                      "found by BM25 alone.")
    keys, matrix = loaded
    rows = await asyncio.to_thread(nearest, matrix, vector, pool)
    missing = await asyncio.to_thread(corpus.missing_vectors, embedder.key)
    note = (f"Without embeddings, by BM25 alone: {', '.join(missing)}." if missing else "")
    return [keys[row] for row in rows], note


def _fused(lexical: list[tuple[Key, float]],
           semantic: list[Key]) -> list[tuple[Key, float, int | None, int | None]]:
    """Reciprocal rank fusion of the two rankings, best first."""
    bm25_ranks = {key: rank for rank, (key, _) in enumerate(lexical, 1)}
    vector_ranks = {key: rank for rank, key in enumerate(semantic, 1)}
    fused = []
    for key in bm25_ranks.keys() | vector_ranks.keys():
        b, v = bm25_ranks.get(key), vector_ranks.get(key)
        score = sum(1.0 / (RRF_K + rank) for rank in (b, v) if rank is not None)
        fused.append((key, score, b, v))
    fused.sort(key=lambda item: (-item[1], item[0]))
    return fused
