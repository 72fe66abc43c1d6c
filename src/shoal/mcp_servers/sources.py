"""`shoal mcp sources`: search the task's sources for cited passages, walk the knowledge graph of
its documents, and query its data with SQL.

Works over `sources/` in the attempt's workspace (`SHOAL_WORKSPACE`), where a task's files
arrive (a large one as its text, `<name>.txt`). Documents (Markdown, text, HTML, PDF, Word) are
searched with `search_passages`, which indexes each on first use (`shoal.retrieval.index`)
under `SHOAL_INDEX_DIR`, else `<workspace>/.index`; an index is named by the file's content,
so a folder shared between attempts makes every later task over the same file reuse it, and
one made on another worker travels through the control plane (`shoal.retrieval.handoff`: it is
adopted from the workspace's `.index/`, and what this server used is put there to go back).
`graph_neighbors` walks a graph of the documents' entities and relations (`shoal.retrieval.graph`),
extracted on first use and kept in the same folder beside each index. Data files (CSV, Parquet,
SQLite, Excel) are tables for `query_data` (`shoal.retrieval.sql`).

Embeddings come from the worker's settings (`SHOAL_EMBEDDING_MODEL`, `SHOAL_EMBEDDING_PROVIDER`
and that provider's base URL and key, from this process's environment): without them search is
BM25 alone, and each result says which mode ran and why. The graph's entities and relations are
extracted by the chat model at `SHOAL_OPENAI_COMPAT_BASE_URL` (`SHOAL_OPENAI_COMPAT_MODEL`); without
one, heuristically, and `graph_neighbors` says which ran and why. Every tool answers JSON; what
goes wrong is an `error` the agent can act on, never a crash of the server.
"""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations
from pydantic import ValidationError

from shoal.artifacts.sources import SourceKind
from shoal.config import Settings
from shoal.errors import ShoalError
from shoal.mcp_servers import workspace
from shoal.retrieval import handoff
from shoal.retrieval import index as indexes
from shoal.retrieval.answers import described
from shoal.retrieval.chunks import Chunk
from shoal.retrieval.corpus import Corpus
from shoal.retrieval.embeddings import Embedder, embedder_from_settings
from shoal.retrieval.extraction import ChatExtractor, extractor_from_settings
from shoal.retrieval.folder import DOCUMENT_KINDS, SourceFile, source_files
from shoal.retrieval.graph import (
    MAX_DEPTH,
    KnowledgeGraph,
    Neighborhood,
    knowledge_graph,
    neighbors,
)
from shoal.retrieval.search import SearchResult
from shoal.retrieval.search import search_passages as search
from shoal.retrieval.sql import DATA_KINDS, DataCatalog, DataFile, open_catalog, table_names
from shoal.retrieval.sql import query_data as run_sql
from shoal.retrieval.sql_writer import write_sql

server = MCPServer("sources", instructions=(
    "Read the task's own sources (the user's files under sources/). search_passages finds "
    "passages of the documents that answer a question, each with its id and citation (a PDF's "
    "page, else the heading and lines it is under): cite those, quoting the passage's words "
    "exactly. graph_neighbors names the entities related to "
    "the ones you give (within 1 to 3 hops) and the passages each relation came from. "
    "list_sources says what there is; data_schema and query_data answer questions about data "
    "files (CSV, Parquet, SQLite, Excel) with one read-only SQL SELECT."))

MAX_K = 20
_SCHEMA_KINDS = frozenset({SourceKind.sqlite, SourceKind.xlsx})  # a table per table or sheet
_READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)


@dataclass
class _Shelf:
    """What this server keeps between calls: open indexes, the knowledge graph and the data
    catalog."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    opened: dict[tuple[str, int, int], indexes.Index] = field(default_factory=dict)
    corpus: Corpus | None = None
    graph: KnowledgeGraph | None = None
    graph_key: tuple[object, ...] = ()
    catalog: DataCatalog | None = None
    catalog_key: tuple[tuple[str, int, int], ...] = ()


_shelf: _Shelf | None = None


def _the_shelf() -> _Shelf:
    global _shelf
    if _shelf is None:  # made on first use, inside the server's event loop
        _shelf = _Shelf()
    return _shelf


def _sources() -> list[SourceFile]:
    """The files under `sources/`, sniffed (this blocks: call it in a thread)."""
    return source_files(workspace() / "sources")


def _index_dir() -> Path:
    configured = os.environ.get("SHOAL_INDEX_DIR")
    return Path(configured) if configured else workspace() / ".index"


def _embedder() -> tuple[Embedder | None, str]:
    """The configured embedding model, or None and why there is none."""
    try:
        # Only the provider and embedding settings are read here: the secret-key check of the
        # control plane does not concern this process, and a workspace's .env is not trusted.
        settings = Settings(_env_file=None, mode="dev")
        return embedder_from_settings(settings), ""
    except (ShoalError, ValidationError) as exc:
        message = exc.message if isinstance(exc, ShoalError) else str(exc).splitlines()[0]
        return None, f"The embedding settings are not usable ({message})."


def _extractor() -> tuple[ChatExtractor | None, str]:
    """The configured chat model that extracts the graph, or None and why there is none."""
    try:
        return extractor_from_settings(Settings(_env_file=None, mode="dev")), ""
    except ValidationError as exc:
        return None, f"The chat model settings are not usable ({str(exc).splitlines()[0]})."


async def _indexed(documents: list[SourceFile]) -> list[indexes.Index]:
    """The documents' indexes, each built where it is not yet — nor handed to this task by the
    control plane (`handoff.adopt`) — (call it holding the lock)."""
    shelf = _the_shelf()
    if any(source.key not in shelf.opened for source in documents):
        await asyncio.to_thread(handoff.adopt, workspace() / ".index", _index_dir())
    opened: list[indexes.Index] = []
    for source in documents:
        if source.key not in shelf.opened:
            assert source.kind is not None
            shelf.opened[source.key] = await indexes.build(
                source.path, kind=source.kind, index_dir=_index_dir(), document=source.name)
        opened.append(shelf.opened[source.key])
    return opened


async def _handed_on(opened: list[indexes.Index]) -> None:
    """Put the indexes of these documents (and their graphs) where the worker sends them to
    the control plane, for the next worker over the same files (`handoff.publish`)."""
    await asyncio.to_thread(handoff.publish, _index_dir(), workspace() / ".index",
                            {index.sha256 for index in opened})


async def _corpus(documents: list[SourceFile],
                  embedder: Embedder | None) -> tuple[Corpus, list[str]]:
    """The documents as one corpus: each indexed where it is not yet (with its embeddings where
    an embedding model is configured), the corpus kept while the documents stay the same;
    and notes on what could not be done."""
    shelf = _the_shelf()
    async with shelf.lock:
        opened = await _indexed(documents)
        notes = await _embedded(opened, embedder) if embedder is not None else []
        await _handed_on(opened)
        if shelf.corpus is None or shelf.corpus.indexes != tuple(opened):
            if shelf.corpus is not None:
                shelf.corpus.close()
            shelf.corpus = await Corpus.open(opened)
        return shelf.corpus, notes


async def _embedded(opened: list[indexes.Index], embedder: Embedder) -> list[str]:
    """Give every index the embedder's vectors where it lacks them; what failed, if any."""
    for index in opened:
        try:
            await indexes.embed(index, embedder)
        except ShoalError as exc:  # the endpoint is down or refuses: tried again next call
            return [f"Passages could not be embedded ({exc.message})."]
    return []


def _passage(chunk: Chunk) -> dict[str, Any]:
    """A passage as the tools answer it: its id, its citation as a person reads it (and its
    parts), and its whole text."""
    where = chunk.citation
    return {"id": chunk.id, "citation": where.label(), "document": where.document,
            "page": where.page, "heading": where.heading,
            "lines": [where.first_line, where.last_line], "text": chunk.text}


def _passages(result: SearchResult) -> list[dict[str, Any]]:
    return [{**_passage(hit.chunk), "score": round(hit.score, 6)} for hit in result.passages]


@server.tool(annotations=_READ_ONLY)
async def search_passages(query: str, k: int = 5) -> str:
    """Passages of the task's documents (Markdown, text, HTML, PDF, Word under sources/) that
    best answer `query`, best first, at most `k` (1 to 20). Each has its id (`3fa9c1d2:14`),
    its citation as a person reads it (`report.pdf, page 3`; `guide.html, "Thread Safety",
    lines 40-52`: the page of a PDF, else the nearest heading and the lines), those parts,
    and its whole text: cite by id or citation, and quote its words exactly. `mode` says how
    they were found: "hybrid" (words and meaning, fused) or "bm25" (words alone; `note` says
    why). Returns JSON."""
    if not query.strip():
        return json.dumps({"error": "query is empty: ask with the words of the question."})
    documents = [s for s in await asyncio.to_thread(_sources) if s.kind in DOCUMENT_KINDS]
    if not documents:
        return json.dumps({"error": "The task has no documents to search (Markdown, text, "
                                    "HTML, PDF or Word under sources/). Call list_sources to "
                                    "see what there is; data files answer query_data."})
    embedder, problem = _embedder()
    try:
        corpus, notes = await _corpus(documents, embedder)
        result = await search(corpus, query, k=max(1, min(k, MAX_K)), embedder=embedder)
    except ShoalError as exc:
        return json.dumps({"error": exc.message})
    note = " ".join(n for n in [problem, result.note, *notes] if n)
    return json.dumps({"query": query, "mode": str(result.mode), "note": note,
                       "passages": _passages(result)}, ensure_ascii=False)


async def _graph(documents: list[SourceFile], extractor: ChatExtractor | None) -> KnowledgeGraph:
    """The documents' knowledge graph, each source's extracted where it is missing; kept while
    the documents and the extractor stay the same (a heuristic stand-in for a model that could
    not answer is not kept: the model is asked again next call)."""
    shelf = _the_shelf()
    async with shelf.lock:
        opened = await _indexed(documents)
        key = (tuple(s.key for s in documents), extractor.key if extractor else None)
        if shelf.graph is None or shelf.graph_key != key:
            graph = await knowledge_graph(opened, extractor)
            await _handed_on(opened)  # the indexes, and the graphs kept beside them
            if extractor is not None and graph.mode is not extractor.mode:
                return graph
            shelf.graph, shelf.graph_key = graph, key
        return shelf.graph


def _neighborhood(found: Neighborhood) -> dict[str, Any]:
    """The edges found, each citing its passages by id, and those passages once each."""
    passages: dict[str, dict[str, Any]] = {}
    edges: list[dict[str, Any]] = []
    for edge in found.edges:
        for chunk in edge.passages:
            passages.setdefault(chunk.id, _passage(chunk))
        cited = list(dict.fromkeys(chunk.id for chunk in edge.passages))
        edges.append({"subject": edge.subject, "relation": edge.relation,
                      "object": edge.object, "hop": edge.hop, "passages": cited})
    return {"entities": list(found.entities), "edges": edges,
            "passages": list(passages.values()),
            "edges_found": found.found, "truncated": found.found > len(found.edges),
            "not_found": [{"name": m.name, "suggestions": list(m.suggestions),
                           "note": m.note()} for m in found.missing]}


@server.tool(annotations=_READ_ONLY)
async def graph_neighbors(entities: list[str], depth: int = 1) -> str:
    """The relations around `entities` (names as the documents write them; case and spacing do
    not matter) in a knowledge graph of the task's documents: every edge (subject, relation,
    object) within `depth` hops (1 to 3; 1: the relations of the named entities themselves),
    nearest and best attested first, each citing by id the passages it came from (listed once
    each, with their citation and text, as search_passages gives them). `not_found` lists names
    no entity has, with close matches. `mode` says how the graph was extracted: "model" (the
    chat model) or "heuristic" (capitalised names related by sharing a sentence; `note` says
    why). Returns JSON."""
    if not 1 <= depth <= MAX_DEPTH:
        return json.dumps({"error": f"depth must be 1, 2 or 3 (hops from the named entities); "
                                    f"got {depth}."})
    names = [e for e in entities if e.strip()]
    if not names:
        return json.dumps({"error": "entities is empty: name at least one, as the documents "
                                    "write it (e.g. a person, place or organisation)."})
    documents = [s for s in await asyncio.to_thread(_sources) if s.kind in DOCUMENT_KINDS]
    if not documents:
        return json.dumps({"error": "The task has no documents to draw a graph from (Markdown, "
                                    "text, HTML, PDF or Word under sources/). Call "
                                    "list_sources to see what there is."})
    extractor, problem = _extractor()
    try:
        graph = await _graph(documents, extractor)
        found = neighbors(graph.graph, names, depth)
    except ShoalError as exc:
        return json.dumps({"error": exc.message})
    note = " ".join(n for n in [problem, graph.note] if n)
    return json.dumps({"depth": depth, "mode": str(graph.mode), "note": note,
                       **_neighborhood(found)}, ensure_ascii=False)


@server.tool(annotations=_READ_ONLY)
async def list_sources() -> str:
    """The task's sources under sources/: each file's name, kind, size, and which tool reads it
    (search_passages for documents, query_data for data files, with its table name). Returns
    JSON."""
    found = await asyncio.to_thread(_sources)
    data = [DataFile(s.name, s.path, s.kind) for s in found if s.kind in DATA_KINDS]
    tables = table_names(data)
    listed: list[dict[str, Any]] = []
    for source in found:
        entry: dict[str, Any] = {"name": source.name, "file": f"sources/{source.path.name}",
                                 "kind": source.kind, "bytes": source.size}
        if source.kind in DOCUMENT_KINDS:
            entry["read_with"] = "search_passages"
        elif source.kind in DATA_KINDS:
            entry["read_with"] = "query_data"
            entry["schema" if source.kind in _SCHEMA_KINDS else "table"] = tables[source.name]
        else:
            entry["problem"] = source.problem
        listed.append(entry)
    return json.dumps({"sources": listed}, ensure_ascii=False)


async def _catalog() -> DataCatalog:
    shelf = _the_shelf()
    data = [s for s in await asyncio.to_thread(_sources) if s.kind in DATA_KINDS]
    key = tuple(s.key for s in data)
    async with shelf.lock:
        if shelf.catalog is None or shelf.catalog_key != key:
            if shelf.catalog is not None:
                shelf.catalog.close()
            files = [DataFile(s.name, s.path, s.kind) for s in data if s.kind is not None]
            shelf.catalog, shelf.catalog_key = await open_catalog(files), key
        return shelf.catalog


def _schema(catalog: DataCatalog) -> dict[str, Any]:
    tables = [{"table": t.name, "source": t.source, "rows": t.rows,
               "columns": [{"name": c.name, "type": c.type} for c in t.columns],
               **({"note": t.note} if t.note else {})} for t in catalog.tables]
    return {"tables": tables, "unreadable": list(catalog.problems),
            "how": "query_data(sql) runs one read-only SELECT (or WITH … SELECT) over these "
                   "tables, in DuckDB's SQL dialect; query_data(question) has the worker's "
                   "chat model write it. `rows` is each table's size: a LIMIT without "
                   "ORDER BY picks rows arbitrarily, so rank with ORDER BY."}


@server.tool(annotations=_READ_ONLY)
async def data_schema() -> str:
    """The tables query_data can read: one per CSV or Parquet file (named after the file),
    `<file>.<table>` for each table of a SQLite file and `<file>.<sheet>` for each sheet of an
    Excel workbook; each with its source, row count and columns (name and type). Returns
    JSON."""
    return json.dumps(_schema(await _catalog()), ensure_ascii=False)


@server.tool(annotations=_READ_ONLY)
async def query_data(sql: str = "", question: str = "") -> str:
    """Run one read-only SQL statement (a SELECT, or WITH … SELECT, in DuckDB's dialect) over
    the task's data tables (see data_schema) and return the SQL that ran, the columns and up
    to 200 rows (`truncated` says if there were more), the tables read with their sizes,
    `about` (how many rows of how many, ordered or not), the `citation` of the rows (`SQL: … —
    rows 1-5 of 5`: cite that) and, for rows without an ORDER BY, a `warning`: they are in no
    particular order, so never call them the largest, most, least, first or top; rank with
    ORDER BY (the warning says which). Give `sql`, or a `question` for the
    worker's chat model to write the SQL from the tables' schema (`written_by` says so).
    Anything else (writes, ATTACH, COPY, PRAGMA, SET, files, several statements) is refused
    with the reason; a query is stopped after 10 seconds. Returns JSON."""
    if bool(sql.strip()) == bool(question.strip()):
        return json.dumps({"error": "Give either sql (one SELECT) or a question, not both "
                                    "and not neither."})
    catalog = await _catalog()
    written_by = "you"
    if question.strip():
        chat, problem = _extractor()
        if chat is None:
            return json.dumps({"error": (problem or "No chat model is configured to write "
                                         "the SQL") + ": call data_schema and give sql."})
        try:
            sql = await write_sql(chat, question, json.dumps(_schema(catalog)["tables"]))
        except ShoalError as exc:
            return json.dumps({"error": exc.message, "question": question})
        written_by = "model"
    try:
        result = await run_sql(catalog, sql)
    except ShoalError as exc:
        return json.dumps({"error": exc.message, "sql": sql, "written_by": written_by},
                          ensure_ascii=False)
    return json.dumps({"sql": result.sql, "written_by": written_by,
                       "columns": list(result.columns),
                       "rows": [list(r) for r in result.rows], "row_count": len(result.rows),
                       "truncated": result.truncated, "seconds": result.seconds,
                       **described(result, question=question)},
                      ensure_ascii=False, default=str)
