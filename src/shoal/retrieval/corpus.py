"""A task's sources searched as one collection: their indexes, one BM25 table, one matrix.

BM25 weighs a word by how rare it is among the passages searched. Each source's index knows
only its own passages, where its own subject is everywhere and so weighs nothing ("lighthouse"
in every passage of the lighthouse's history): merging the scores of separate indexes ranks
that source's best passage below other sources' chance matches. So over several sources
`Corpus.open` copies their passages into one contentless FTS5 table in memory (about a second
per 10k passages, once per set of sources) and BM25 runs there, over the whole collection;
over one source its own table serves. Vectors need no such care: a model's vectors of every
source are stacked into one matrix, searched with one product.

A passage is keyed `(n, chunk id)`, `n` being its index's position in `Corpus.indexes`.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Sequence
from contextlib import closing

import numpy as np
import numpy.typing as npt

from shoal.retrieval.chunks import Chunk
from shoal.retrieval.embeddings import Vectors
from shoal.retrieval.index import TOKENIZE, Index

Key = tuple[int, int]
"""A passage of the corpus: (which index, chunk id)."""

_SHIFT = 32  # a combined rowid is (index number << 32) + chunk id


class Corpus:
    """The indexes of one task's sources, searched as one collection. Its methods block: call
    them through `asyncio.to_thread`. Closing it leaves the indexes open (they are the
    caller's)."""

    def __init__(self, indexes: Sequence[Index], combined: sqlite3.Connection | None) -> None:
        self.indexes = tuple(indexes)
        self._combined = combined
        self._lock = threading.Lock()
        self._vectors: dict[str, tuple[list[Key], Vectors]] = {}

    @classmethod
    async def open(cls, indexes: Sequence[Index]) -> Corpus:
        """The collection of `indexes` (with one BM25 table over all when there are several)."""
        if len(indexes) < 2:
            return cls(indexes, None)
        return cls(indexes, await asyncio.to_thread(_combined_table, indexes))

    def close(self) -> None:
        """Free the combined table."""
        if self._combined is not None:
            with self._lock:
                self._combined.close()

    def bm25(self, match: str, limit: int) -> list[tuple[Key, float]]:
        """The best `limit` passages for the FTS5 query `match`, as (key, score), best first."""
        if self._combined is None:
            return [((0, chunk_id), score) for index in self.indexes
                    for chunk_id, score in index.bm25(match, limit)]
        with self._lock:
            rows = self._combined.execute(
                "SELECT rowid, bm25(passages) FROM passages WHERE passages MATCH ? "
                "ORDER BY bm25(passages) LIMIT ?", (match, limit)).fetchall()
        return [((int(r) >> _SHIFT, int(r) & ((1 << _SHIFT) - 1)), -float(s)) for r, s in rows]

    def vectors(self, model: str) -> tuple[list[Key], Vectors] | None:
        """Every passage's vector from `model` that the indexes hold, stacked, with its key;
        None when no index holds any. Cached once every index has them."""
        if model in self._vectors:
            return self._vectors[model]
        keys: list[Key] = []
        parts: list[Vectors] = []
        for n, index in enumerate(self.indexes):
            loaded = index.vectors(model)
            if loaded is not None:
                ids, matrix = loaded
                keys.extend((n, int(i)) for i in ids)
                parts.append(matrix)
        if not parts or len({p.shape[1] for p in parts}) > 1:
            return None
        stacked: tuple[list[Key], Vectors] = keys, np.vstack(parts)
        if len(parts) == len(self.indexes):
            self._vectors[model] = stacked
        return stacked

    def missing_vectors(self, model: str) -> list[str]:
        """The documents whose index holds no vectors from `model`."""
        if model in self._vectors:  # cached only once every index had them
            return []
        return [index.document for index in self.indexes if model not in index.models()]

    def chunks(self, keys: Sequence[Key]) -> dict[Key, Chunk]:
        """The passages with these keys, cited."""
        wanted: dict[int, list[int]] = {}
        for n, chunk_id in keys:
            wanted.setdefault(n, []).append(chunk_id)
        return {(n, chunk_id): chunk for n, ids in wanted.items()
                for chunk_id, chunk in self.indexes[n].chunks(ids).items()}


def nearest(matrix: Vectors, vector: npt.NDArray[np.float32], limit: int) -> list[int]:
    """The rows of `matrix` (unit vectors) most similar to `vector`, best first: exact cosine
    similarity, one matrix product and a partial sort."""
    if not len(matrix) or matrix.shape[1] != vector.shape[0]:
        return []
    similarity = matrix @ vector
    best = np.argpartition(-similarity, min(limit, len(similarity)) - 1)[:limit]
    return [int(i) for i in best[np.argsort(-similarity[best], kind="stable")]]


def _combined_table(indexes: Sequence[Index]) -> sqlite3.Connection:
    """One in-memory FTS5 table (no copy of the text kept) over every index's passages."""
    db = sqlite3.connect(":memory:", check_same_thread=False)
    with closing(db.cursor()) as cursor:
        cursor.execute("CREATE VIRTUAL TABLE passages USING fts5(text, content='', "
                       f"tokenize='{TOKENIZE}')")
        for n, index in enumerate(indexes):
            cursor.executemany("INSERT INTO passages (rowid, text) VALUES (?, ?)",
                               [((n << _SHIFT) + i, text) for i, text in index.chunk_texts()])
    db.commit()
    return db
