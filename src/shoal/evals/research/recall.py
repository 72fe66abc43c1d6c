"""Retrieval measured alone: each answerable part's question searched over the set's documents,
as `shoal mcp sources`' `search_passages` searches a task's sources, with no model and no
server.

The documents are indexed into a folder of the caller's (`shoal.retrieval.index`) and searched
as one corpus (`shoal.retrieval.search.search_passages`), once by BM25 alone and, when an
embedder is given, once hybrid. A passage found is a hit for a gold passage when it holds its
snippet (`GoldPassage.found_in`). For each part answered by passages:

- recall@5: the share of its gold passages held by the first 5 passages found;
- reciprocal rank: 1 / the rank of the first passage that holds any of them (0 when none of
  the first `DEPTH` does).

A question's figures are the means over its parts, and the set's over all parts (each part
counts once, whatever its question). Parts answered by the data file are `query_data`'s, not
search's, and are not counted here.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from shoal.artifacts.sources import SourceKind, sniff_file
from shoal.demo.fake.server import running_fake_server
from shoal.demo.model import create_demo_model_app
from shoal.evals.research.goldset import GoldSet, Part
from shoal.retrieval import index as indexes
from shoal.retrieval.corpus import Corpus
from shoal.retrieval.embeddings import Embedder, EmbeddingApi, EmbeddingClient
from shoal.retrieval.search import SearchResult, search_passages
from shoal.retrieval.sql import DATA_KINDS

K = 5
"""Recall is measured over the first K passages found (what `search_passages` returns by
default)."""

DEPTH = 10
"""How far down the ranking the reciprocal rank looks."""

FAKE_EMBEDDING_MODEL = "shoal-demo-embeddings"


@dataclass(frozen=True, slots=True)
class PartRecall:
    """How search did on one part: gold passages found in the first K, and the first hit's
    rank (None: none in the first DEPTH)."""

    question: str
    part: str
    found: int
    of: int
    rank: int | None

    @property
    def recall(self) -> float:
        return self.found / self.of

    @property
    def reciprocal_rank(self) -> float:
        return 1.0 / self.rank if self.rank else 0.0


@dataclass(frozen=True, slots=True)
class Retrieval:
    """One way of searching (`mode`: bm25 or hybrid) over every part answered by passages."""

    mode: str
    parts: tuple[PartRecall, ...]
    note: str = ""

    @property
    def recall_at_k(self) -> float:
        return _mean([p.recall for p in self.parts])

    @property
    def mrr(self) -> float:
        return _mean([p.reciprocal_rank for p in self.parts])

    def of_question(self, question: str) -> tuple[float, float] | None:
        """A question's recall@K and MRR, or None when no part of it is searched."""
        mine = [p for p in self.parts if p.question == question]
        if not mine:
            return None
        return _mean([p.recall for p in mine]), _mean([p.reciprocal_rank for p in mine])

    def as_json(self) -> dict[str, object]:
        return {"mode": self.mode, "k": K, "recall_at_5": round(self.recall_at_k, 4),
                "mrr": round(self.mrr, 4), "note": self.note,
                "parts": [{"question": p.question, "part": p.part, "found": p.found,
                           "of": p.of, "recall_at_5": round(p.recall, 4),
                           "first_hit_rank": p.rank} for p in self.parts]}


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


async def measure_retrieval(gold: GoldSet, *, index_dir: Path,
                            embedder: Embedder | None = None) -> list[Retrieval]:
    """BM25 alone, then (with `embedder`) hybrid, over the set's documents indexed in
    `index_dir`."""
    documents = [(path, kind) for path in gold.files
                 if (kind := sniff_file(path, path.name)) not in DATA_KINDS]
    built = [await indexes.build(path, kind=SourceKind(kind), index_dir=index_dir)
             for path, kind in documents]
    corpus = await Corpus.open(built)
    try:
        results = [await _measured(gold, corpus, None)]
        if embedder is not None:
            for index in built:
                await indexes.embed(index, embedder)
            results.append(await _measured(gold, corpus, embedder))
        return results
    finally:
        corpus.close()
        for index in built:
            index.close()


async def _measured(gold: GoldSet, corpus: Corpus, embedder: Embedder | None) -> Retrieval:
    parts: list[PartRecall] = []
    mode, notes = "bm25", set()
    for question in gold.questions:
        for part in question.parts:
            if not part.passages:
                continue
            found = await search_passages(corpus, part.question, k=DEPTH, embedder=embedder)
            mode = str(found.mode)
            if found.note:
                notes.add(found.note)
            parts.append(_scored(question.id, part, found))
    return Retrieval(mode, tuple(parts), " ".join(sorted(notes)))


def _scored(question: str, part: Part, found: SearchResult) -> PartRecall:
    texts = [p.chunk.text for p in found.passages]
    in_top = sum(any(gold.found_in(t) for t in texts[:K]) for gold in part.passages)
    rank = next((n for n, t in enumerate(texts, 1)
                 if any(gold.found_in(t) for gold in part.passages)), None)
    return PartRecall(question, part.id, in_top, len(part.passages), rank)


@contextlib.asynccontextmanager
async def fake_embedder() -> AsyncIterator[Embedder]:
    """The bundled fake embeddings (`shoal.demo.fake.embeddings`: hashed words, not a learned
    model) served over HTTP in this process, as an embedder."""
    async with running_fake_server(create_demo_model_app()) as root:
        yield EmbeddingClient(api=EmbeddingApi.openai, base_url=f"{root}/v1",
                              model=FAKE_EMBEDDING_MODEL)
