"""The knowledge graph: heuristic extraction, traversal by depth with passages that resolve,
graphs kept beside the index and reused, and a model's bad answers skipped (against the fake
model server's scripted extractor)."""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from starlette.applications import Starlette

from shoal.artifacts.sources import SourceKind
from shoal.demo.fake.exchange import request_log
from shoal.demo.model import create_demo_model_app, running_demo_model
from shoal.errors import InvalidInput
from shoal.retrieval import index as indexes
from shoal.retrieval.extraction import (
    CO_OCCURS,
    EXTRACTOR_ROLE,
    HEURISTIC,
    NO_CHAT_MODEL,
    ChatExtractor,
    Extraction,
    ExtractionMode,
    Triple,
    extract_heuristic,
)
from shoal.retrieval.graph import (
    Neighborhood,
    build_graph,
    graph_path,
    knowledge_graph,
    neighbors,
)
from tests.retrieval.samples import filler

# Three sections (each its own passage): a chain Mara Quill - Harbour Authority - Ministry of
# Transport - EU, each link stated in a different section.
HARBOUR = "\n\n".join([
    "# Keepers",
    f"{filler(21, 3)} Mara Quill designed the Gull Island Lighthouse for the Harbour "
    f"Authority. {filler(22, 3)}",
    "## Funding",
    f"{filler(23, 2)} The Harbour Authority reports to the Ministry of Transport. "
    f"{filler(24, 2)}",
    "## Oversight",
    f"In 1998 the Ministry of Transport answered to the EU on safety. {filler(25, 2)}",
]) + "\n"


@pytest.fixture
async def harbour(tmp_path: Path) -> AsyncIterator[indexes.Index]:
    path = tmp_path / "sources" / "harbour.md"
    path.parent.mkdir()
    path.write_text(HARBOUR, encoding="utf-8")
    index = await indexes.build(path, kind=SourceKind.markdown, index_dir=tmp_path / "index")
    yield index
    index.close()


@pytest.fixture
def app() -> Starlette:
    return create_demo_model_app()


@pytest.fixture
async def model(app: Starlette) -> AsyncIterator[ChatExtractor]:
    async with running_demo_model(app) as base_url:
        yield ChatExtractor(base_url=base_url, model="shoal-demo", max_retries=0)


def _triples(found: Neighborhood) -> set[tuple[str, str, str, int]]:
    return {(e.subject, e.relation, e.object, e.hop) for e in found.edges}


def _extraction_requests(app: Starlette) -> int:
    return sum(1 for r in request_log(app) if r.conversation is not None
               and any(EXTRACTOR_ROLE in t for t in r.conversation.texts("system")))


def test_heuristic_names_are_capitalised_runs_and_acronyms_related_by_sentence() -> None:
    """Sentence words ("In", "The") and a leading year are not names; "of" and a closing number
    stay inside one; an acronym stands alone; only entities of one sentence are related."""
    found = extract_heuristic("In 1874 the Ministry of Transport hired Mara Quill's crew at "
                              "Pier 3. The EU paid. NASA watched")
    assert found == Extraction(
        ("Ministry of Transport", "Mara Quill", "Pier 3", "EU", "NASA"),
        (Triple("Mara Quill", CO_OCCURS, "Ministry of Transport"),
         Triple("Mara Quill", CO_OCCURS, "Pier 3"),
         Triple("Ministry of Transport", CO_OCCURS, "Pier 3")))


async def test_depth_one_gives_the_entities_own_edges_and_depth_two_their_neighbours(
        harbour: indexes.Index) -> None:
    """Without a chat model the graph is heuristic (and says why); depth 1 holds the edges
    touching the named entity, depth 2 also those touching its neighbours."""
    graph = await knowledge_graph([harbour], None)
    near = neighbors(graph.graph, ["mara   QUILL"], 1)
    wider = neighbors(graph.graph, ["Mara Quill"], 2)
    assert (graph.mode, graph.note, graph.extracted) == (ExtractionMode.heuristic, NO_CHAT_MODEL,
                                                          ("harbour.md",))
    assert near.entities == ("Mara Quill",)
    assert _triples(near) == {("Gull Island Lighthouse", CO_OCCURS, "Mara Quill", 1),
                              ("Harbour Authority", CO_OCCURS, "Mara Quill", 1)}
    assert _triples(wider) == _triples(near) | {
        ("Gull Island Lighthouse", CO_OCCURS, "Harbour Authority", 2),
        ("Harbour Authority", CO_OCCURS, "Ministry of Transport", 2)}
    assert [e.hop for e in wider.edges] == [1, 1, 2, 2]  # nearest first
    assert ("EU", CO_OCCURS, "Ministry of Transport", 3) in _triples(
        neighbors(graph.graph, ["Mara Quill"], 3))


async def test_every_edge_cites_the_passages_it_came_from(harbour: indexes.Index) -> None:
    """Each edge's passages are real passages of the document: the citation's character range
    is the passage's text, under its heading, and the text names both ends of the edge."""
    graph = await knowledge_graph([harbour], None)
    found = neighbors(graph.graph, ["EU"], 3)
    assert len(found.edges) == 4
    for edge in found.edges:
        assert edge.passages
        for chunk in edge.passages:
            where = chunk.citation
            assert where.document == "harbour.md"
            assert HARBOUR[where.start:where.end] == chunk.text
            assert edge.subject in chunk.text
            assert edge.object in chunk.text
    by_edge = {(e.subject, e.object): e.passages[0].citation.heading for e in found.edges}
    assert by_edge[("EU", "Ministry of Transport")] == "Oversight"
    assert by_edge[("Harbour Authority", "Ministry of Transport")] == "Funding"


async def test_a_graph_is_extracted_once_and_reused_from_the_index_folder(
        harbour: indexes.Index, model: ChatExtractor, app: Starlette) -> None:
    """The model is asked once per passage the first time; a second task over the same file
    (a new opening of its index) reads the graph file written then and asks nothing."""
    first = await knowledge_graph([harbour], model)
    asked = _extraction_requests(app)
    kept = graph_path(harbour.path.parent, harbour.sha256, model)
    written = kept.stat().st_mtime_ns
    reopened = indexes.open(harbour.path.parent, harbour.sha256, document="harbour.md")
    second = await knowledge_graph([reopened], model)
    reopened.close()
    assert (first.mode, first.note, first.extracted) == (ExtractionMode.model, "", ("harbour.md",))
    assert asked == harbour.chunk_count() == 3
    assert (second.extracted, _extraction_requests(app)) == ((), asked)
    assert kept.stat().st_mtime_ns == written
    stored = json.loads(kept.read_text(encoding="utf-8"))
    assert stored["graph"]["info"]["extractor"] == "chat:shoal-demo"
    assert {"nodes", "edges", "multigraph"} <= stored.keys()  # networkx node-link JSON
    assert _triples(neighbors(second.graph, ["Mara Quill"], 1)) == _triples(
        neighbors(first.graph, ["Mara Quill"], 1))


async def test_bad_model_answers_are_skipped_and_counted(tmp_path: Path, model: ChatExtractor,
                                                         app: Starlette) -> None:
    """A passage answered with prose, and one with JSON of the wrong shape, are left out and
    counted in the note; the good passage's entities are in the graph."""
    path = tmp_path / "notes.md"
    path.write_text("# Good\n\nMara Quill met the Harbour Authority.\n\n# Prose\n\n"
                    "[demo:extraction=broken] Ada Byron wrote.\n\n# Shape\n\n"
                    "[demo:extraction=invalid] Alan Turing read.\n", encoding="utf-8")
    index = await indexes.build(path, kind=SourceKind.markdown, index_dir=tmp_path / "index")
    graph = await knowledge_graph([index], model)
    source = await build_graph(index, model)
    index.close()
    assert graph.mode is ExtractionMode.model
    assert graph.note.startswith("2 of 3 passages of notes.md were left out: the model's "
                                 "answer was not the JSON asked for (")
    assert "entities: Input should be a valid array" in graph.note
    assert (source.built, source.info.skipped, source.info.passages) == (False, 2, 3)
    assert set(graph.graph.nodes) == {"mara quill", "harbour authority"}


async def test_an_unreachable_model_falls_back_to_the_heuristic(
        harbour: indexes.Index) -> None:
    """When the chat endpoint cannot be reached the graph is heuristic and says why; no model
    graph is written, so the model is tried again next time."""
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    down = ChatExtractor(base_url=f"http://127.0.0.1:{port}/v1", model="m", max_retries=0)
    graph = await knowledge_graph([harbour], down)
    assert graph.mode is ExtractionMode.heuristic
    assert graph.note.startswith("The chat model could not extract the graph (The chat "
                                 f"endpoint http://127.0.0.1:{port}/v1/chat/completions could "
                                 "not be reached")
    assert not graph_path(harbour.path.parent, harbour.sha256, down).exists()
    assert graph_path(harbour.path.parent, harbour.sha256, HEURISTIC).exists()


async def test_names_not_found_are_noted_with_close_matches(harbour: indexes.Index) -> None:
    """A misspelt name is suggested its entity, a word of a name the names holding it, and a
    name like none gets a note saying how to ask."""
    graph = await knowledge_graph([harbour], None)
    found = neighbors(graph.graph, ["Harbour Authoritty", "quill", "Atlantis"], 1)
    assert (found.entities, found.edges) == ((), ())
    typo, word, nothing = found.missing
    assert typo.suggestions[0] == "Harbour Authority"
    assert typo.note().startswith('No entity named "Harbour Authoritty" in the sources\' '
                                  'graph. Did you mean: "Harbour Authority"')
    assert word.suggestions == ("Mara Quill",)
    assert (nothing.suggestions, nothing.note()) == ((), (
        'No entity named "Atlantis" in the sources\' graph. Ask for a name as the documents '
        "write it (search_passages finds them)."))


@pytest.mark.parametrize("depth", [0, 4])
async def test_a_depth_out_of_range_is_refused(harbour: indexes.Index, depth: int) -> None:
    """Depth is 1 to 3 hops; anything else is an error saying so."""
    graph = await knowledge_graph([harbour], None)
    with pytest.raises(InvalidInput, match=f"depth must be 1 to 3 .*got {depth}"):
        neighbors(graph.graph, ["Mara Quill"], depth)
