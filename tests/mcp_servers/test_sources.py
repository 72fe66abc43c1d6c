"""`shoal mcp sources` over real stdio with the official `mcp` client, as a worker starts it, on
a workspace holding a Markdown guide, a PDF, a CSV, a Parquet file and a SQLite database.
The worker's data folder (`SHOAL_DATA_DIR`, where its index folder is) is each test's own."""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from starlette.applications import Starlette

from shoal.demo.fake.exchange import request_log
from shoal.demo.model import create_demo_model_app, recorded_requests, running_demo_model
from shoal.protocol import McpServer
from shoal.retrieval import index as indexes
from shoal.retrieval.embeddings import NO_EMBEDDING_MODEL
from shoal.retrieval.extraction import EXTRACTOR_ROLE, NO_CHAT_MODEL
from shoal.tools.mcp_config import launch
from tests.artifacts.real_files import write_docx, write_packages_csv, write_xlsx
from tests.retrieval.samples import BUILT_FACT, FERRY_FACT, write_data, write_documents

pytestmark = pytest.mark.timeout(90)


@contextlib.asynccontextmanager
async def connected(workspace: Path, **env: str) -> AsyncIterator[Client]:
    """A client of `shoal mcp sources` started as a worker starts it, plus `env`."""
    how = launch(McpServer(name="sources", command="shoal", args=["mcp", "sources"]), workspace)
    async with Client(StdioServerParameters(command=how.command, args=list(how.args),
                                            env={**how.env, **env}, cwd=str(workspace)),
                      read_timeout_seconds=60) as client:
        yield client


async def call(client: Client, tool: str, **arguments: object) -> Any:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result
    return json.loads(getattr(result.content[0], "text", ""))


@pytest.fixture(autouse=True)
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The worker's data folder: `launch` puts the shared index folder in it (`index/`)."""
    monkeypatch.setenv("SHOAL_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "attempt"
    write_documents(root / "sources")
    write_data(root / "sources")
    return root


async def test_every_tool_answers_over_stdio_without_embeddings(workspace: Path,
                                                                 data_dir: Path) -> None:
    """Listing, BM25 search with citations, the schema and a query all work, and search says
    it ran without vectors; the indexes go to the worker's index folder (`<data>/index`)."""
    async with connected(workspace) as sources:
        listed = await call(sources, "list_sources")
        found = await call(sources, "search_passages", query="first ferry Gull Island", k=2)
        schema = await call(sources, "data_schema")
        rows = await call(sources, "query_data",
                          sql="SELECT count(*) AS orders FROM shop.orders")
    by_name = {s["name"]: s for s in listed["sources"]}
    assert by_name["history.pdf"]["read_with"] == "search_passages"
    assert (by_name["sales.csv"]["read_with"], by_name["sales.csv"]["table"]) == (
        "query_data", "sales")
    assert by_name["shop.db"]["schema"] == "shop"
    assert (found["mode"], found["note"]) == ("bm25", NO_EMBEDDING_MODEL)
    best = found["passages"][0]
    assert FERRY_FACT in best["text"]
    assert (best["document"], best["heading"], best["page"]) == ("guide.md", "Timetable", None)
    lines = (workspace / "sources/guide.md").read_text(encoding="utf-8").splitlines()
    first, last = best["lines"]
    assert best["text"] in "\n".join(lines[first - 1:last])  # the lines of the user's file
    assert best["citation"] == f'guide.md, "Timetable", lines {first}\u2013{last}'
    sha = hashlib.sha256((workspace / "sources/guide.md").read_bytes()).hexdigest()
    assert re.fullmatch(rf"{sha[:8]}:\d+", best["id"])
    assert "start" not in best  # offsets into extracted text are no citation
    assert {t["table"] for t in schema["tables"]} == {"sales", "targets", "shop.orders",
                                                       "shop.customers"}
    sql = "SELECT count(*) AS orders FROM shop.orders"
    assert rows == {"sql": sql, "written_by": "you", "columns": ["orders"],
                    "rows": [[3]], "row_count": 1, "truncated": False,
                    "seconds": rows["seconds"], "returned": 1, "ordered": False,
                    "tables": [{"table": "shop.orders", "rows": 3, "source": "shop.db (orders)"}],
                    "about": "1 row of the 3 in shop.orders, in no particular order.",
                    "citation": f"SQL: {sql} \u2014 row 1 of 1"}
    assert len(list((data_dir / "index").glob("*.sqlite"))) == 2


async def test_a_question_to_the_data_has_the_chat_model_write_the_sql(workspace: Path) -> None:
    """`query_data(question=…)`: the worker's chat model writes the SQL from the schema (the
    fake model server's demo script here), which runs read-only and comes back with its rows;
    with no chat model, or with both or neither of sql and question, a clear error."""
    async with running_demo_model() as base_url, connected(
            workspace, SHOAL_OPENAI_COMPAT_BASE_URL=base_url) as sources:
        asked = await call(sources, "query_data", question="What revenue did each region make?")
        both = await call(sources, "query_data", sql="SELECT 1", question="why?")
    async with connected(workspace) as sources:
        alone = await call(sources, "query_data", question="What revenue?")
        neither = await call(sources, "query_data")
    assert asked["written_by"] == "model"
    assert asked["sql"] == 'SELECT "region", "revenue" FROM "sales" LIMIT 5'  # the columns named
    assert asked["columns"] == ["region", "revenue"]
    assert asked["rows"]
    assert "either sql" in both["error"]
    assert "either sql" in neither["error"]
    assert alone["error"].startswith("No chat model is configured to write the SQL")


async def test_refused_sql_is_an_error_result_and_the_server_goes_on(workspace: Path) -> None:
    """A forbidden statement gets a clear `error`; the next good query still answers."""
    async with connected(workspace) as sources:
        dropped = await call(sources, "query_data", sql="DROP TABLE sales")
        passwd = await call(sources, "query_data", sql="SELECT * FROM read_csv('/etc/passwd')")
        good = await call(sources, "query_data", sql="SELECT max(target) FROM targets")
    assert dropped["error"].startswith("DROP statements are refused")
    assert dropped["sql"] == "DROP TABLE sales"
    assert "read_csv() is refused" in passwd["error"]
    assert good["rows"] == [[2500]]


async def test_search_with_the_fake_embeddings_is_hybrid_and_indexes_once(
        workspace: Path, tmp_path: Path) -> None:
    """With an embedding model configured the search is hybrid and cites the PDF's page; a
    second attempt over the same files, sharing the index folder, reuses the index and its
    embeddings: only its question is embedded."""
    app: Starlette = create_demo_model_app()
    shared = tmp_path / "index"
    async with running_demo_model(app) as base_url:
        env = {"SHOAL_OPENAI_COMPAT_BASE_URL": base_url, "SHOAL_EMBEDDING_MODEL": "embed-demo",
               "SHOAL_INDEX_DIR": str(shared)}
        async with connected(workspace, **env) as sources:
            first = await call(sources, "search_passages", query="When was the lighthouse "
                               "built?", k=3)
        indexed = {p: p.stat().st_mtime_ns for p in shared.glob("*.sqlite")}
        embedded = [len(r.body["input"]) for r in request_log(app)
                    if r.api == "openai_embeddings"]
        later = tmp_path / "later-attempt"
        write_documents(later / "sources")
        async with connected(later, **env) as sources:
            second = await call(sources, "search_passages", query="lighthouse built", k=1)
        asked = [len(r.body["input"]) for r in request_log(app)
                 if r.api == "openai_embeddings"][len(embedded):]
    assert (first["mode"], first["note"]) == ("hybrid", "")
    assert BUILT_FACT in first["passages"][0]["text"]
    assert (first["passages"][0]["document"], first["passages"][0]["page"]) == (
        "history.pdf", 2)
    assert first["passages"][0]["citation"] == "history.pdf, page 2"
    assert sum(embedded) > 2  # every passage of both documents, and the question
    assert second["mode"] == "hybrid"
    assert asked == [1]  # the question alone
    assert {p: p.stat().st_mtime_ns for p in shared.glob("*.sqlite")} == indexed
    # Each attempt leaves the indexes it used where its worker sends them on (`.index/`).
    assert sorted(p.name for p in (later / ".index").glob("*.sqlite")) == sorted(
        p.name for p in indexed)


async def test_indexes_handed_over_from_another_worker_are_adopted_not_built(
        workspace: Path, tmp_path: Path) -> None:
    """A worker that has never seen the files, handed their indexes (with their embeddings)
    in the workspace's `.index/` as the control plane does, builds and embeds nothing: only
    the question is embedded."""
    app: Starlette = create_demo_model_app()
    env = {"SHOAL_EMBEDDING_MODEL": "embed-demo"}
    async with running_demo_model(app) as base_url:
        env["SHOAL_OPENAI_COMPAT_BASE_URL"] = base_url
        async with connected(workspace, SHOAL_INDEX_DIR=str(tmp_path / "worker-a"),
                             **env) as sources:
            await call(sources, "search_passages", query="When was the lighthouse built?")
        handed = sorted(p.name for p in (workspace / ".index").iterdir())
        before = len([r for r in request_log(app) if r.api == "openai_embeddings"])
        elsewhere = tmp_path / "on-worker-b"
        write_documents(elsewhere / "sources")
        shutil.copytree(workspace / ".index", elsewhere / ".index")
        async with connected(elsewhere, SHOAL_INDEX_DIR=str(tmp_path / "worker-b"),
                             **env) as sources:
            found = await call(sources, "search_passages",
                               query="When was the lighthouse built?", k=3)
        asked = [len(r.body["input"]) for r in request_log(app)
                 if r.api == "openai_embeddings"][before:]
    assert any(name.endswith(".sqlite") for name in handed)
    assert found["mode"] == "hybrid"
    assert any(BUILT_FACT in p["text"] for p in found["passages"])
    assert asked == [1]  # the question alone: no passage embedded again
    assert sorted(p.name for p in (tmp_path / "worker-b").iterdir()
                  if p.suffix == ".sqlite") == [n for n in handed if n.endswith(".sqlite")]


async def test_a_workspace_without_sources_says_what_to_do(tmp_path: Path) -> None:
    """Search in an empty workspace is an error naming what it needs; listing is empty."""
    async with connected(tmp_path) as sources:
        found = await call(sources, "search_passages", query="anything")
        listed = await call(sources, "list_sources")
        schema = await call(sources, "data_schema")
    assert "no documents to search" in found["error"]
    assert listed == {"sources": []}
    assert schema["tables"] == []


async def test_a_large_source_sent_as_its_text_is_cited_by_its_own_name(tmp_path: Path) -> None:
    """`report.pdf.txt` (a source too large to send, as its text) is cited as `report.pdf`,
    with the pages its text marks."""
    sources_dir = tmp_path / "sources"
    sources_dir.mkdir()
    (sources_dir / "report.pdf.txt").write_text(
        "[page 1]\nIntroduction.\n\n[page 2]\nThe bridge opened in 1932.\n", encoding="utf-8")
    async with connected(tmp_path) as sources:
        found = await call(sources, "search_passages", query="bridge opened", k=1)
    best = found["passages"][0]
    assert (best["document"], best["page"], best["text"]) == (
        "report.pdf", 2, "The bridge opened in 1932.")


async def test_graph_neighbors_without_a_chat_model_is_heuristic_and_cited(
        workspace: Path, data_dir: Path) -> None:
    """Without a chat model the graph is heuristic and says why; a name in any case and
    spacing finds its entity, whose edge cites a passage that is the document's own text, and
    a name the graph lacks gets a note. Each document's graph is kept beside its index."""
    async with connected(workspace) as sources:
        found = await call(sources, "graph_neighbors", entities=["gull  ISLAND", "Atlantis"])
    assert (found["mode"], found["note"], found["depth"]) == ("heuristic", NO_CHAT_MODEL, 1)
    assert found["entities"] == ["Gull Island"]
    (passage,) = found["passages"]
    assert found["edges"] == [{"subject": "Gull Island", "relation": "co_occurs",
                               "object": "Pier 3", "hop": 1, "passages": [passage["id"]]}]
    lines = (workspace / "sources/guide.md").read_text(encoding="utf-8").splitlines()
    assert (passage["document"], passage["heading"]) == ("guide.md", "Timetable")
    assert passage["text"] in "\n".join(lines[passage["lines"][0] - 1:passage["lines"][1]])
    assert FERRY_FACT in passage["text"]
    assert found["not_found"][0]["note"].startswith('No entity named "Atlantis"')
    assert len(list((data_dir / "index").glob("*.graph.v1.*.heuristic-*.json"))) == 2


async def test_graph_neighbors_refuses_a_bad_depth_and_no_names(workspace: Path) -> None:
    """A depth outside 1..3, or no name at all, is an error saying what to send."""
    async with connected(workspace) as sources:
        deep = await call(sources, "graph_neighbors", entities=["Gull Island"], depth=4)
        empty = await call(sources, "graph_neighbors", entities=[" "])
    assert deep == {"error": "depth must be 1, 2 or 3 (hops from the named entities); got 4."}
    assert empty["error"].startswith("entities is empty")


async def test_graph_neighbors_with_the_fake_chat_model_extracts_once(
        workspace: Path, tmp_path: Path) -> None:
    """With a chat model configured the graph is the model's (one extraction request per
    passage, to the fake model server); a later attempt sharing the index folder reuses it
    and asks the model nothing."""
    app: Starlette = create_demo_model_app()

    def extractions() -> int:
        return sum(1 for r in request_log(app) if r.conversation is not None
                   and EXTRACTOR_ROLE in "".join(r.conversation.texts("system")))

    async with running_demo_model(app) as base_url:
        env = {"SHOAL_OPENAI_COMPAT_BASE_URL": base_url,
               "SHOAL_INDEX_DIR": str(tmp_path / "index")}
        async with connected(workspace, **env) as sources:
            first = await call(sources, "graph_neighbors", entities=["Gull Island"], depth=2)
        asked = extractions()
        later = tmp_path / "later-attempt"
        write_documents(later / "sources")
        async with connected(later, **env) as sources:
            second = await call(sources, "graph_neighbors", entities=["gull island"], depth=2)
    assert (first["mode"], first["note"]) == ("model", "")
    assert [(e["subject"], e["object"]) for e in first["edges"]] == [("Gull Island", "Pier 3")]
    assert asked == len(recorded_requests(app)) == _passage_count(tmp_path / "index",
                                                                   workspace / "sources")
    assert extractions() == asked
    assert second == first


def _passage_count(index_dir: Path, folder: Path) -> int:
    """How many passages the indexes of the guide and the history hold."""
    total = 0
    for name in ("guide.md", "history.pdf"):
        index = indexes.open(index_dir, indexes.content_hash(folder / name), document=name)
        total += index.chunk_count()
        index.close()
    return total


async def test_a_word_document_is_searched_and_a_workbook_queried(tmp_path: Path) -> None:
    """A .docx is a document search_passages cites under its headings; each sheet of a .xlsx
    is a table for query_data, named `<file>.<sheet>` (files built from this machine's
    licence text and package list)."""
    root = tmp_path / "attempt"
    (root / "sources").mkdir(parents=True)
    write_docx(root / "sources" / "licence.docx")
    rows = write_xlsx(root / "sources" / "packages.xlsx")
    async with connected(root) as sources:
        listed = await call(sources, "list_sources")
        found = await call(sources, "search_passages", query="patent litigation terminate", k=1)
        schema = await call(sources, "data_schema")
        counted = await call(sources, "query_data",
                             sql="SELECT count(*) AS n FROM packages.packages")
    by_name = {s["name"]: s for s in listed["sources"]}
    assert (by_name["licence.docx"]["kind"], by_name["licence.docx"]["read_with"]) == (
        "docx", "search_passages")
    assert (by_name["packages.xlsx"]["read_with"], by_name["packages.xlsx"]["schema"]) == (
        "query_data", "packages")
    best = found["passages"][0]
    assert (best["document"], best["heading"]) == ("licence.docx", "3. Grant of Patent License.")
    assert "patent litigation" in best["text"]
    assert {t["table"] for t in schema["tables"]} == {"packages.packages", "packages.sheet_2024",
                                                       "packages.sections"}
    assert counted["rows"] == [[len(rows)]]


async def test_query_data_says_the_tables_size_and_that_unordered_rows_are_no_ranking(
        tmp_path: Path) -> None:
    """Over a CSV of this machine's installed packages, `SELECT * … LIMIT 5` answers 5 of N
    rows with a warning that they are in no particular order and the ORDER BY to rank them;
    with ORDER BY, no warning; data_schema gives every table's size."""
    root = tmp_path / "attempt"
    (root / "sources").mkdir(parents=True)
    rows = write_packages_csv(root / "sources" / "packages.csv")
    async with connected(root) as sources:
        schema = await call(sources, "data_schema")
        first = await call(sources, "query_data", sql='SELECT * FROM "packages" LIMIT 5')
        ranked = await call(sources, "query_data", sql="SELECT package FROM packages ORDER BY "
                                                       "installed_kib DESC LIMIT 5")
    assert [(t["table"], t["rows"]) for t in schema["tables"]] == [("packages", len(rows))]
    assert (first["returned"], first["ordered"]) == (5, False)
    assert first["about"] == (f"5 rows of the {len(rows):,} in packages (LIMIT 5), in no "
                              "particular order.")
    assert "do not present them as the largest" in first["warning"]
    assert 'ORDER BY a column DESC (largest first) or ASC (smallest first), e.g. one of ' \
           '"installed_kib"' in first["warning"]
    assert first["citation"].endswith("\u2014 rows 1\u20135 of 5")
    assert ranked["ordered"]
    assert "warning" not in ranked
