"""A small corpus of real files for the retrieval tests: a Markdown guide with headings, a
three-page PDF (rendered by WeasyPrint), a CSV, a Parquet file (written by DuckDB) and a SQLite
database, each fact planted once so a test knows which passage answers which question."""

from __future__ import annotations

import random
import sqlite3
from contextlib import closing
from pathlib import Path

import duckdb
import weasyprint  # type: ignore[import-untyped]

FERRY_FACT = "The first ferry to Gull Island leaves Pier 3 at 06:40 on weekdays."
FARE_FACT = "An adult single ticket costs 4.20 euros; children under twelve travel free."
RAMP_FACT = "Every vessel has a ramp, and guide dogs are welcome on board."
BUILT_FACT = "The lighthouse was built in 1874 by the engineer Mara Quill."
AUTOMATED_FACT = "The lamp was automated in 1962, and the last keeper left in 1965."

_VOCABULARY = ["committee", "council", "minutes", "review", "annual", "plan", "budget",
               "meeting", "report", "members", "agenda", "notes", "summary", "draft", "proposal",
               "vote", "chair", "office", "season", "visitors", "weather", "record", "archive",
               "shelf", "library", "garden", "market", "square", "street"]


def filler(seed: int, sentences: int) -> str:
    """Neutral sentences that answer none of the planted questions."""
    rng = random.Random(seed)
    out = []
    for _ in range(sentences):
        words = [rng.choice(_VOCABULARY) for _ in range(rng.randint(6, 14))]
        out.append(" ".join(words).capitalize() + ".")
    return " ".join(out)


def guide_markdown() -> str:
    """The ferry guide: a title, three sections (each longer than one passage) and code."""
    return "\n\n".join([
        "# Harbourview Ferry Guide",
        filler(1, 4),
        "## Timetable",
        filler(2, 8), f"{filler(3, 3)} {FERRY_FACT} {filler(4, 2)}", filler(5, 8),
        "## Fares",
        "```sh\n# not a heading: a comment in code\nprint-fares --all\n```",
        filler(6, 6), f"{FARE_FACT} {filler(7, 3)}", filler(8, 6),
        "## Accessibility",
        filler(9, 5), RAMP_FACT, filler(10, 5),
    ]) + "\n"


def render_history_pdf() -> bytes:
    """A three-page PDF about the lighthouse, one fact on page 2 and one on page 3."""
    pages = [f"<h1>Gull Island Lighthouse</h1><p>{filler(11, 6)}</p>",
             f"<p>{filler(12, 5)}</p><p>{BUILT_FACT}</p><p>{filler(13, 5)}</p>",
             f"<p>{filler(14, 4)}</p><p>{AUTOMATED_FACT}</p>"]
    html = "".join(f"<section style='page-break-after: always'>{p}</section>" for p in pages)
    pdf: bytes = weasyprint.HTML(string=html).write_pdf()
    return pdf


def write_documents(folder: Path) -> dict[str, Path]:
    """The guide (`guide.md`) and the history (`history.pdf`) in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    guide = folder / "guide.md"
    guide.write_text(guide_markdown(), encoding="utf-8")
    history = folder / "history.pdf"
    history.write_bytes(render_history_pdf())
    return {"guide.md": guide, "history.pdf": history}


SALES_ROWS = [("north", "2024-01", 1200), ("north", "2024-02", 1350), ("south", "2024-01", 800),
              ("south", "2024-02", 950), ("west", "2024-01", 400)]


def write_data(folder: Path) -> dict[str, Path]:
    """`sales.csv`, `targets.parquet` (written by DuckDB) and `shop.db` (SQLite) in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    csv_path = folder / "sales.csv"
    csv_path.write_text("region,month,revenue\n" + "".join(
        f"{r},{m},{v}\n" for r, m, v in SALES_ROWS), encoding="utf-8")
    parquet = folder / "targets.parquet"
    with closing(duckdb.connect()) as db:
        db.execute("COPY (SELECT * FROM (VALUES ('north', 2500), ('south', 2000), "
                   "('west', 900)) AS t(region, target)) TO "
                   f"'{parquet.as_posix()}' (FORMAT parquet)")
    shop = folder / "shop.db"
    with closing(sqlite3.connect(shop)) as db:
        db.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, customer TEXT, total REAL)")
        db.executemany("INSERT INTO orders VALUES (?, ?, ?)",
                       [(1, "Ada", 12.5), (2, "Grace", 30.0), (3, "Ada", 7.25)])
        db.execute("CREATE TABLE customers (name TEXT, city TEXT)")
        db.executemany("INSERT INTO customers VALUES (?, ?)",
                       [("Ada", "London"), ("Grace", "Arlington")])
        db.commit()
    return {"sales.csv": csv_path, "targets.parquet": parquet, "shop.db": shop}
