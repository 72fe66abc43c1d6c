"""A knowledge graph of a task's documents: entities, relations, and the passages they came from.

`build_graph(index, extractor)` extracts entities and relations (`shoal.retrieval.extraction`)
from each passage of one source's index (`shoal.retrieval.index`) and keeps the graph beside that
index, as networkx node-link JSON named by the source's content hash, the index's format (its
edges name the index's passages by number) and the extractor
(`<sha256>.graph.v<FORMAT>.i<index FORMAT>.<mode>-<digest>.json`), so every later task over the
same file reuses it; a model's unusable answers are left out and counted in the graph's `GraphInfo`.

`knowledge_graph(indexes, extractor)` merges the sources' graphs into one whose edges carry their
cited passages, by the model when one is given and by the heuristic otherwise — or when the model
cannot be reached — saying why in its `note`; `neighbors(graph, entities, depth)` walks it from
named entities, pure.
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import fcntl
import hashlib
import json
import os
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import networkx as nx  # type: ignore[import-untyped]  # networkx ships no type information
from pydantic import TypeAdapter

from shoal.errors import InvalidInput, ShoalError
from shoal.retrieval.chunks import Chunk
from shoal.retrieval.extraction import (
    HEURISTIC,
    NO_CHAT_MODEL,
    Extraction,
    ExtractionMode,
    Extractor,
    Skipped,
    display_name,
    entity_key,
)
from shoal.retrieval.index import FORMAT as INDEX_FORMAT
from shoal.retrieval.index import Index

FORMAT = 1
"""The graph file's format: a file of another format is not read (a new one is extracted)."""

MAX_DEPTH = 3
MAX_EDGES = 30
"""At most this many edges in one answer, the nearest and best attested first."""
MAX_PASSAGES_PER_EDGE = 3


# ---- one source's graph, kept beside its index -------------------------------------------


@dataclass(frozen=True, slots=True)
class GraphInfo:
    """What made a graph: the extractor, how many passages it read and skipped (with the
    first few reasons), and how long extraction took."""

    extractor: str
    mode: ExtractionMode
    passages: int
    skipped: int = 0
    reasons: tuple[str, ...] = ()
    seconds: float = 0.0


_INFO = TypeAdapter(GraphInfo)


@dataclass(frozen=True, slots=True)
class SourceGraph:
    """One source's graph — nodes keyed by `entity_key` (attribute `name`), edges keyed by
    relation (attribute `passages`: chunk ids of the source's index) — what made it, and
    whether this call extracted it (False: read from the index folder)."""

    graph: nx.MultiDiGraph
    info: GraphInfo
    built: bool


def graph_path(index_dir: Path, sha256: str, extractor: Extractor) -> Path:
    """Where the graph of the source with this content hash, by `extractor`, is kept."""
    digest = hashlib.sha256(extractor.key.encode()).hexdigest()[:16]
    return index_dir / f"{sha256}.graph.v{FORMAT}.i{INDEX_FORMAT}.{extractor.mode}-{digest}.json"


async def build_graph(index: Index, extractor: Extractor) -> SourceGraph:
    """The graph of `index`'s passages by `extractor`: read from the index folder when it is
    there, else extracted (once, even by two builders at once) and written there."""
    target = graph_path(index.path.parent, index.sha256, extractor)
    if (found := await asyncio.to_thread(_read, target, extractor.key)) is not None:
        return found
    async with _locked(index.path.parent / f"{index.sha256}.graph.lock"):
        if (found := await asyncio.to_thread(_read, target, extractor.key)) is not None:
            return found
        started = time.perf_counter()
        passages = await asyncio.to_thread(index.chunk_texts)
        results = await extractor.extract([text for _, text in passages])
        skipped = [r.reason for r in results if isinstance(r, Skipped)]
        info = GraphInfo(extractor.key, extractor.mode, len(passages), len(skipped),
                         tuple(skipped[:3]), round(time.perf_counter() - started, 3))
        graph = graph_of([i for i, _ in passages], results)
        await asyncio.to_thread(_write, target, graph, info, index.sha256)
        return SourceGraph(graph, info, built=True)


def graph_of(chunk_ids: Sequence[int], results: Sequence[Extraction | Skipped]) -> nx.MultiDiGraph:
    """The graph of passages' extractions (`chunk_ids[i]` is the passage of `results[i]`)."""
    graph = nx.MultiDiGraph()
    for chunk_id, result in zip(chunk_ids, results, strict=True):
        if isinstance(result, Skipped):
            continue
        for name in result.entities:
            _add_entity(graph, name)
        for triple in result.relations:
            subject, target = _add_entity(graph, triple.subject), _add_entity(graph, triple.object)
            relation = " ".join(triple.relation.split()).lower()
            if not subject or not target or subject == target or not relation:
                continue
            if graph.has_edge(subject, target, relation):
                cited: list[int] = graph.edges[subject, target, relation]["passages"]
                if chunk_id not in cited:
                    cited.append(chunk_id)
            else:
                graph.add_edge(subject, target, key=relation, passages=[chunk_id])
    return graph


def _add_entity(graph: nx.MultiDiGraph, name: str) -> str:
    key = entity_key(name)
    if key and key not in graph:
        graph.add_node(key, name=display_name(name))
    return key


def _read(path: Path, extractor: str) -> SourceGraph | None:
    """The graph kept at `path`, or None when there is none (or it is of another format or
    extractor, or damaged: then it is extracted again)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data["graph"]["format"] != FORMAT:
            return None
        info = _INFO.validate_python(data["graph"]["info"])
        graph = nx.node_link_graph(data, directed=True, multigraph=True, edges="edges")
    except (FileNotFoundError, ValueError, KeyError, TypeError, nx.NetworkXError):
        return None
    return SourceGraph(graph, info, built=False) if info.extractor == extractor else None


def _write(target: Path, graph: nx.MultiDiGraph, info: GraphInfo, sha256: str) -> None:
    """Write the graph as node-link JSON: under a temporary name, then renamed."""
    graph.graph.update(format=FORMAT, sha256=sha256, info=_INFO.dump_python(info, mode="json"))
    data = nx.node_link_data(graph, edges="edges")
    scratch = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
    try:
        scratch.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
        os.replace(scratch, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            scratch.unlink()


@contextlib.asynccontextmanager
async def _locked(path: Path) -> AsyncIterator[None]:
    """Hold a lock file: one extractor of a source's graph at a time, across processes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = await asyncio.to_thread(path.open, "a+b")
    try:
        # Blocking flock in a thread; closing the file releases the lock whatever happens.
        await asyncio.to_thread(fcntl.flock, handle.fileno(), fcntl.LOCK_EX)
        yield
    finally:
        handle.close()


# ---- a task's graph ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class KnowledgeGraph:
    """A task's documents as one graph — nodes keyed by `entity_key` (attribute `name`), edges
    keyed by relation (attribute `passages`: the `Chunk`s it came from, cited) — how it was
    extracted, what it says about that (`note`: why heuristic, what was skipped), and the
    documents whose graph was extracted by this call (the others were reused)."""

    graph: nx.MultiDiGraph
    mode: ExtractionMode
    note: str
    extracted: tuple[str, ...]


async def knowledge_graph(indexes: Sequence[Index],
                          extractor: Extractor | None) -> KnowledgeGraph:
    """The graph of `indexes` by `extractor` (None: no chat model, the heuristic), each
    source's graph built where it is missing. When the model cannot answer, the heuristic's
    graph, with the reason in `note`."""
    reason = NO_CHAT_MODEL
    if extractor is not None:
        try:
            return await _merged(indexes, extractor, "")
        except ShoalError as exc:
            reason = (f"The chat model could not extract the graph ({exc.message}), so it was "
                      "extracted without one (heuristic): capitalised names and acronyms, "
                      "related by co_occurs when they share a sentence.")
    return await _merged(indexes, HEURISTIC, reason)


async def _merged(indexes: Sequence[Index], extractor: Extractor, note: str) -> KnowledgeGraph:
    merged = nx.MultiDiGraph()
    notes = [note] if note else []
    extracted: list[str] = []
    for index in indexes:
        source = await build_graph(index, extractor)
        if source.built:
            extracted.append(index.document)
        if source.info.skipped:
            notes.append(f"{source.info.skipped} of {source.info.passages} passages of "
                         f"{index.document} were left out: the model's answer was not the "
                         f"JSON asked for ({'; '.join(source.info.reasons)}).")
        wanted = sorted({i for *_, ids in source.graph.edges(data="passages") for i in ids})
        chunks = await asyncio.to_thread(index.chunks, wanted)
        _merge(merged, source.graph, chunks)
    return KnowledgeGraph(merged, extractor.mode, " ".join(notes), tuple(extracted))


def _merge(merged: nx.MultiDiGraph, graph: nx.MultiDiGraph, chunks: dict[int, Chunk]) -> None:
    for key, name in graph.nodes(data="name"):
        if key not in merged:
            merged.add_node(key, name=name)
    for subject, target, relation, ids in graph.edges(keys=True, data="passages"):
        cited = [chunks[i] for i in ids if i in chunks]
        if merged.has_edge(subject, target, relation):
            merged.edges[subject, target, relation]["passages"].extend(cited)
        else:
            merged.add_edge(subject, target, key=relation, passages=cited)


# ---- traversal (pure) ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Edge:
    """A relation found: subject, relation, object (as the graph names them), how many hops
    from the named entities it lies (1: it touches one), and the passages it came from."""

    subject: str
    relation: str
    object: str
    hop: int
    passages: tuple[Chunk, ...]


@dataclass(frozen=True, slots=True)
class Missing:
    """A name asked for that no entity has, and the entities whose names come close."""

    name: str
    suggestions: tuple[str, ...]

    def note(self) -> str:
        """What to tell the one who asked."""
        said = f'No entity named "{self.name}" in the sources\' graph.'
        if self.suggestions:
            return said + " Did you mean: " + ", ".join(f'"{s}"' for s in self.suggestions) + "?"
        return said + " Ask for a name as the documents write it (search_passages finds them)."


@dataclass(frozen=True, slots=True)
class Neighborhood:
    """What `neighbors` found: the entities matched (as the graph names them), the edges
    within the depth (nearest and best attested first, at most a limit of `found`), and the
    names that matched nothing."""

    entities: tuple[str, ...]
    edges: tuple[Edge, ...]
    missing: tuple[Missing, ...]
    found: int


def neighbors(graph: nx.MultiDiGraph, entities: Sequence[str], depth: int, *,
              limit: int = MAX_EDGES) -> Neighborhood:
    """The edges of `graph` (a `KnowledgeGraph.graph`) within `depth` hops (1 to `MAX_DEPTH`)
    of the `entities`, whichever way they point. Names match case- and space-insensitively."""
    if not 1 <= depth <= MAX_DEPTH:
        raise InvalidInput(f"depth must be 1 to {MAX_DEPTH} (hops from the named entities); "
                           f"got {depth}.")
    starts = list(dict.fromkeys(k for k in map(entity_key, entities) if k in graph))
    missing = tuple(Missing(name.strip(), _suggestions(graph, entity_key(name)))
                    for name in entities if entity_key(name) not in graph)
    distance = _distances(graph, starts, depth - 1)
    found: dict[tuple[str, str, str], tuple[int, list[Chunk]]] = {}
    for node in distance:
        for subject, target, relation, cited in [
                *graph.out_edges(node, keys=True, data="passages"),
                *graph.in_edges(node, keys=True, data="passages")]:
            hop = min(distance.get(subject, depth), distance.get(target, depth)) + 1
            found[subject, target, relation] = (hop, cited)
    ranked = sorted(found.items(), key=lambda item: (item[1][0], -len(item[1][1]), item[0]))
    names = graph.nodes(data="name")
    edges = tuple(Edge(names[s], relation, names[t], hop,
                       tuple(_ordered(cited)[:MAX_PASSAGES_PER_EDGE]))
                  for (s, t, relation), (hop, cited) in ranked[:limit])
    return Neighborhood(tuple(names[k] for k in starts), edges, missing, len(found))


def _distances(graph: nx.MultiDiGraph, starts: list[str], most: int) -> dict[str, int]:
    """Hops from `starts` to every node at most `most` hops away, either way along edges."""
    distance = dict.fromkeys(starts, 0)
    frontier = starts
    for hop in range(1, most + 1):
        reached = []
        for node in frontier:
            for other in [*graph.successors(node), *graph.predecessors(node)]:
                if other not in distance:
                    distance[other] = hop
                    reached.append(other)
        frontier = reached
    return distance


def _ordered(chunks: list[Chunk]) -> list[Chunk]:
    unique = {(c.citation.document, c.citation.start): c for c in chunks}
    return [unique[k] for k in sorted(unique)]


def _suggestions(graph: nx.MultiDiGraph, key: str, count: int = 5) -> tuple[str, ...]:
    """Entities whose names are close to `key`, or hold all its words."""
    if not key:
        return ()
    keys: list[str] = list(graph.nodes)
    close = difflib.get_close_matches(key, keys, n=count, cutoff=0.6)
    words = set(key.split())
    holding = sorted((k for k in keys if words <= set(k.split())),
                     key=lambda k: (-graph.degree(k), k))
    picked = list(dict.fromkeys([*close, *holding]))[:count]
    return tuple(graph.nodes[k]["name"] for k in picked)
