"""One source's index: a SQLite file named by the source's content hash, built once, reused.

The caller says where index files live (`index_dir`); the file is `<sha256>.v<FORMAT>.sqlite`
and holds:

- `chunks`: the passages of the source's text (`shoal.retrieval.chunks`) with their page,
  heading, lines and character range, numbered from 1 in the text's order: passage `n` of the
  source whose content hash starts `3fa9c1d2` has the id `3fa9c1d2:n` (`passage_id`), the same
  on every worker that indexes the same file (the index's format fixes how it is cut);
- `chunks_fts`: an FTS5 table over them (Porter stemming), for BM25;
- `vectors`: an embedding per chunk per model (`<api>:<model>`), L2-normalised float32 blobs,
  added by `embed` when an embedding model is configured.

`build` makes the file if it is missing (under a lock file, so two builders of one source,
even in two processes, build it once; written under a temporary name and renamed, so a crash
leaves no half-built index) and otherwise opens the one there. `embed` adds a model's vectors
once, in one transaction. `open` opens an index that exists. An index is named by content, not
by file name: the name a task gives its source is only how passages are cited.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import os
import sqlite3
import threading
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import closing
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import numpy.typing as npt

from shoal.artifacts.sources import SourceKind, extract_text
from shoal.errors import NotFound, ToolError
from shoal.retrieval.chunks import Chunk, Citation, split_passages
from shoal.retrieval.embeddings import Embedder, Vectors

FORMAT = 2
"""The index file's format, and of the text and passages in it: a file of another format is
not read (a new one is built). 2: HTML pages are read as their main content, passages are
whole sentences, and each has its lines."""

ID_HEX = 8
"""How many hex digits of the content hash begin a passage's id."""

MAX_TEXT_CHARS = 2_000_000
"""How much of a source's text is indexed (the `source_text_chars` setting's default)."""

TOKENIZE = "porter unicode61 remove_diacritics 2"
"""How FTS5 cuts text into words: Unicode-aware, accents folded, English endings stemmed."""

_SCHEMA = f"""
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE chunks (id INTEGER PRIMARY KEY, start INTEGER NOT NULL, "end" INTEGER NOT NULL,
                     page INTEGER, heading TEXT, first_line INTEGER NOT NULL,
                     last_line INTEGER NOT NULL, text TEXT NOT NULL);
CREATE VIRTUAL TABLE chunks_fts USING fts5(text, content='chunks', content_rowid='id',
                                           tokenize='{TOKENIZE}');
CREATE TABLE vectors (model TEXT NOT NULL, chunk_id INTEGER NOT NULL, vector BLOB NOT NULL);
CREATE UNIQUE INDEX vectors_of_model ON vectors (model, chunk_id);
"""


class Index:
    """One source's index file, open. Its methods block: call them through `asyncio.to_thread`
    (a lock makes that safe from several threads)."""

    def __init__(self, path: Path, *, sha256: str, document: str, built: bool) -> None:
        self.path = path
        self.sha256 = sha256
        self.document = document
        self.built = built
        """True when this index was built by the call that returned it (False: reused)."""
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA busy_timeout = 30000")
        self._lock = threading.Lock()
        self._vectors: dict[str, tuple[npt.NDArray[np.int64], Vectors]] = {}

    def close(self) -> None:
        """Close the file."""
        with self._lock:
            self._db.close()

    def chunk_count(self) -> int:
        """How many passages the index holds."""
        with self._lock:
            (count,) = self._db.execute("SELECT count(*) FROM chunks").fetchone()
        return int(count)

    def chunk_texts(self) -> list[tuple[int, str]]:
        """Every passage's id and text, in order."""
        with self._lock:
            rows = self._db.execute("SELECT id, text FROM chunks ORDER BY id").fetchall()
        return [(int(i), str(t)) for i, t in rows]

    def bm25(self, match: str, limit: int) -> list[tuple[int, float]]:
        """The best `limit` passages for the FTS5 query `match`, as (chunk id, BM25 score),
        best first (a higher score is better)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT rowid, bm25(chunks_fts) FROM chunks_fts WHERE chunks_fts MATCH ? "
                "ORDER BY bm25(chunks_fts) LIMIT ?", (match, limit)).fetchall()
        return [(int(rowid), -float(score)) for rowid, score in rows]

    def models(self) -> list[str]:
        """The embedding models (`<api>:<model>`) whose vectors the index holds."""
        with self._lock:
            rows = self._db.execute("SELECT value FROM meta WHERE key LIKE 'vectors:%' "
                                    "ORDER BY value").fetchall()
        return [str(value) for (value,) in rows]

    def vectors(self, model: str) -> tuple[npt.NDArray[np.int64], Vectors] | None:
        """The chunk ids and the matrix of their vectors for `model` (loaded once), or None
        when the index has none for it."""
        if model in self._vectors:
            return self._vectors[model]
        with self._lock:
            rows = self._db.execute("SELECT chunk_id, vector FROM vectors WHERE model = ? "
                                    "ORDER BY chunk_id", (model,)).fetchall()
        if not rows:
            return None
        ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        matrix = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32)
        loaded = ids, matrix.reshape(len(rows), -1)
        self._vectors[model] = loaded
        return loaded

    def chunks(self, ids: Sequence[int]) -> dict[int, Chunk]:
        """The passages with these numbers, cited as from this index's document."""
        if not ids:
            return {}
        marks = ",".join("?" * len(ids))
        return {int(row[0]): self._chunk(row) for row in self._rows(f"WHERE id IN ({marks})",
                                                                      list(ids))}

    def all_chunks(self) -> list[Chunk]:
        """Every passage, in the text's order."""
        return [self._chunk(row) for row in self._rows("ORDER BY id", [])]

    def _rows(self, where: str, args: list[int]) -> list[tuple[Any, ...]]:
        with self._lock:
            return self._db.execute('SELECT id, start, "end", page, heading, first_line, '
                                    f"last_line, text FROM chunks {where}", args).fetchall()

    def _chunk(self, row: tuple[Any, ...]) -> Chunk:
        number, start, end, page, heading, first, last, text = row
        return Chunk(text, Citation(self.document, page, heading, start, end, first, last),
                     passage_id(self.sha256, int(number)))

    def add_vectors(self, model: str, ids: Sequence[int], vectors: Vectors) -> None:
        """Store `model`'s vectors of the chunks `ids` (in one transaction)."""
        rows = [(model, int(i), np.ascontiguousarray(v, dtype=np.float32).tobytes())
                for i, v in zip(ids, vectors, strict=True)]
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.executemany("INSERT OR REPLACE INTO vectors VALUES (?, ?, ?)", rows)
                self._db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)",
                                 (f"vectors:{model}", model))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        self._vectors.pop(model, None)


def passage_id(sha256: str, number: int) -> str:
    """The id of passage `number` of the source with content hash `sha256`: `3fa9c1d2:14`."""
    return f"{sha256[:ID_HEX]}:{number}"


def content_hash(path: Path) -> str:
    """The SHA-256 of the file at `path`, in hex: what names its index."""
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while block := file.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def index_path(index_dir: Path, sha256: str) -> Path:
    """Where the index of the source with this content hash lives."""
    return index_dir / f"{sha256}.v{FORMAT}.sqlite"


async def build(source: Path, *, kind: SourceKind, index_dir: Path, document: str | None = None,
                max_chars: int = MAX_TEXT_CHARS) -> Index:
    """The index of the file `source` (of `kind`), built if `index_dir` has none for its
    content yet, else the one there; its passages are cited as from `document` (default: the
    file's name). `Index.built` says which happened."""
    sha256 = await asyncio.to_thread(content_hash, source)
    target = index_path(index_dir, sha256)
    name = document or source.name
    if target.exists():  # the common case: no lock needed to open a finished index
        return await asyncio.to_thread(Index, target, sha256=sha256, document=name, built=False)
    async with _locked(index_dir, sha256):
        built = not target.exists()
        if built:
            text = await asyncio.to_thread(extract_text, source, kind, max_chars=max_chars)
            await asyncio.to_thread(_write, target, sha256, split_passages(text, document=name))
        return await asyncio.to_thread(Index, target, sha256=sha256, document=name, built=built)


def open(index_dir: Path, sha256: str, *, document: str) -> Index:
    """The existing index of the content `sha256`, cited as from `document`; `NotFound` when
    there is none (build it with `build`)."""
    target = index_path(index_dir, sha256)
    if not target.exists():
        raise NotFound(f"There is no index of {document!r} in {index_dir}. Build it first.")
    return Index(target, sha256=sha256, document=document, built=False)


async def embed(index: Index, embedder: Embedder) -> bool:
    """Add `embedder`'s vectors of every passage to `index` unless it has them; True when this
    call added them. `ToolError` from the endpoint passes through, leaving the index as it was."""
    if embedder.key in await asyncio.to_thread(index.models):
        return False
    async with _locked(index.path.parent, index.sha256):
        if embedder.key in await asyncio.to_thread(index.models):
            return False
        chunks = await asyncio.to_thread(index.chunk_texts)
        if not chunks:
            return False
        vectors = await embedder.embed([text for _, text in chunks])
        if vectors.shape[0] != len(chunks):
            raise ToolError(f"The embedding model answered {vectors.shape[0]} vectors for "
                            f"{len(chunks)} passages.")
        await asyncio.to_thread(index.add_vectors, embedder.key, [i for i, _ in chunks], vectors)
    return True


def _write(target: Path, sha256: str, chunks: list[Chunk]) -> None:
    """Write a new index file at `target`: under a temporary name, then renamed."""
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
    try:
        with closing(sqlite3.connect(scratch)) as db:
            db.executescript(_SCHEMA)
            db.executemany("INSERT INTO meta VALUES (?, ?)", [
                ("format", str(FORMAT)), ("sha256", sha256), ("chunks", str(len(chunks)))])
            db.executemany('INSERT INTO chunks (id, start, "end", page, heading, first_line, '
                           "last_line, text) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                           [(n, c.citation.start, c.citation.end, c.citation.page,
                             c.citation.heading, c.citation.first_line, c.citation.last_line,
                             c.text) for n, c in enumerate(chunks, 1)])
            db.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('rebuild')")
            db.commit()
        os.replace(scratch, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            scratch.unlink()


@contextlib.asynccontextmanager
async def _locked(index_dir: Path, sha256: str) -> AsyncIterator[None]:
    """Hold the lock file of one source's index: one builder at a time, across processes."""
    handle = await asyncio.to_thread(_lock_file, index_dir / f"{sha256}.lock")
    try:
        # Blocking flock in a thread; closing the file releases the lock whatever happens.
        await asyncio.to_thread(fcntl.flock, handle.fileno(), fcntl.LOCK_EX)
        yield
    finally:
        handle.close()


def _lock_file(path: Path) -> BinaryIO:
    path.parent.mkdir(parents=True, exist_ok=True)
    return path.open("a+b")
