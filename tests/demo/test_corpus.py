"""The Norhaven sample corpus: files of the right kinds whose figures agree with one another,
and the demo's path that uploads them and submits the sample task over them, on a real server."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import duckdb
import pytest
from pypdf import PdfReader

from shoal.api.server import RunningServer, running_server
from shoal.artifacts.sources import SourceKind, extract_text, sniff_file, validate
from shoal.cli.client import Credentials, ShoalClient
from shoal.cli.embedded import submit_sample
from shoal.config import Settings
from shoal.demo.corpus import (
    CORPUS_DIR,
    CORPUS_FILES,
    SAMPLE_QUESTION,
    UNANSWERABLE_QUESTION,
    corpus_files,
)
from shoal.demo.samples import SAMPLES, sample_sources
from tests.runtime.harness import echo_worker, login

KINDS = {".md": SourceKind.markdown, ".pdf": SourceKind.pdf, ".csv": SourceKind.csv}
PDF = CORPUS_DIR / "canopy_strategy_2025_2030.pdf"
CSV = CORPUS_DIR / "district_temperatures.csv"
PDF_HEADINGS = ("Norhaven Canopy Strategy 2025\N{EN DASH}2030", "1. Where Norhaven Stands",
                "2. Targets for 2030", "3. Priority Districts", "4. Funding and Delivery",
                "5. Monitoring and Reporting")
ABSENT = ("pm2.5", "pm 2.5", "pollution", "air quality", "particulate")  # the unanswerable topic


def _flat(text: str) -> str:
    """`text` with every run of white space as one space: sentences wrap in the Markdown."""
    return " ".join(text.split())


def _documents() -> str:
    """The text of every document (Markdown and the PDF), flattened."""
    texts = [p.read_text(encoding="utf-8") for p in corpus_files() if p.suffix == ".md"]
    texts += [page.extract_text() for page in PdfReader(PDF).pages]
    return _flat("\n".join(texts))


def test_corpus_files_are_the_folder_without_its_readme() -> None:
    """`corpus_files()` lists every file of the folder but its README, in the fixed order."""
    assert [p.name for p in corpus_files()] == list(CORPUS_FILES)
    assert {p.name for p in CORPUS_DIR.iterdir()} == {*CORPUS_FILES, "README.md"}


@pytest.mark.parametrize("path", corpus_files(), ids=lambda p: p.name)
def test_every_file_sniffs_as_its_kind_and_has_text(path: Path) -> None:
    """Each file sniffs (from its content) as the kind its extension names, passes that kind's
    validation, and gives a model text to read."""
    kind = sniff_file(path, path.name)
    assert kind == KINDS[path.suffix]
    assert isinstance(kind, SourceKind)
    validate(path, kind)
    assert len(extract_text(path, kind, max_chars=100_000)) > 500


@pytest.mark.parametrize("path", [p for p in corpus_files() if p.suffix == ".md"],
                         ids=lambda p: p.name)
def test_each_markdown_document_is_a_sized_document_with_headings(path: Path) -> None:
    """A Markdown document holds 600 to 1,500 words under one title and several sections."""
    text = path.read_text(encoding="utf-8")
    assert 600 <= len(text.split()) <= 1500
    assert len(re.findall(r"^# ", text, re.MULTILINE)) == 1
    assert len(re.findall(r"^## ", text, re.MULTILINE)) >= 5


def test_the_pdf_is_small_and_its_text_holds_its_headings() -> None:
    """The PDF has 2 or 3 pages, stays under 100 kB, and pypdf extracts each heading whole."""
    reader = PdfReader(PDF)
    assert 2 <= len(reader.pages) <= 3
    assert PDF.stat().st_size < 100_000
    text = "\n".join(page.extract_text() for page in reader.pages)
    for heading in PDF_HEADINGS:
        assert heading in text.splitlines()


def test_the_csv_answers_the_sample_sql_question_as_the_documents_do() -> None:
    """The CSV has one district with the most heat days in 2024 (DuckDB says which), and the
    assessment states that same district and figure in words."""
    top = duckdb.sql(f"SELECT district, heat_days FROM read_csv('{CSV}') WHERE year = 2024 "
                     "ORDER BY heat_days DESC LIMIT 2").fetchall()
    (district, days), (_, runner_up) = top
    assert (district, days) == ("Eastfield", 43)
    assert days > runner_up  # one right answer
    assert f"In 2024 {district} recorded {days} heat days, the most of any district" \
        in _documents()


def test_the_csv_covers_eight_districts_over_six_years() -> None:
    """48 rows, one per district and year from 2019 to 2024, with the five measures."""
    rows = duckdb.sql(f"SELECT count(*), count(DISTINCT district), min(year), max(year) "
                      f"FROM read_csv('{CSV}')").fetchall()
    assert rows == [(48, 8, 2019, 2024)]
    columns = [c[0] for c in duckdb.sql(f"DESCRIBE SELECT * FROM read_csv('{CSV}')").fetchall()]
    assert columns == ["district", "year", "canopy_cover_pct", "mean_summer_temp_c",
                       "heat_days", "trees_planted"]


def test_no_file_touches_the_unanswerable_question() -> None:
    """No document and no CSV cell mentions air pollution, so the corpus cannot answer it."""
    assert "PM2.5" in UNANSWERABLE_QUESTION
    text = (_documents() + CSV.read_text(encoding="utf-8")).lower()
    assert [word for word in ABSENT if word in text] == []


def test_only_the_research_sample_reads_the_corpus() -> None:
    """`research` samples the corpus's question over its files; the other samples read none."""
    assert SAMPLES["research"] == SAMPLE_QUESTION
    assert sample_sources("research") == corpus_files()
    assert [w for w in SAMPLES if sample_sources(w)] == ["research"]


@pytest.fixture
async def server(settings: Settings) -> AsyncIterator[RunningServer]:
    """A control plane on the default test settings."""
    async with running_server(settings) as srv:
        yield srv


async def test_submit_sample_uploads_the_corpus_as_the_tasks_sources(
    server: RunningServer, settings: Settings,
) -> None:
    """`submit_sample` with the corpus uploads its five files and submits a task (of the
    built-in `pipeline` workflow here) that reads them, in order and with their kinds."""
    http = await login(server, settings)
    token = http.headers["Authorization"].removeprefix("Bearer ")
    await http.aclose()
    sample = {"description": SAMPLE_QUESTION, "workflow": "pipeline"}
    async with (echo_worker(server, settings),  # a task is taken only with a worker online
                ShoalClient(Credentials(server.url, token)) as client):
        created = await submit_sample(client, sample, corpus_files())
        detail = await client.task(created["task_id"])
        uploads = (await client.request("GET", "/api/v1/uploads"))["uploads"]
    assert detail["workflow"] == "pipeline"
    assert [(s["name"], s["kind"]) for s in detail["sources"]] == [
        (p.name, KINDS[p.suffix]) for p in corpus_files()]
    assert [s["size"] for s in detail["sources"]] == [p.stat().st_size for p in corpus_files()]
    assert sorted(u["name"] for u in uploads) == sorted(CORPUS_FILES)
