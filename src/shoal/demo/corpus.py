"""The Norhaven sample corpus: fictional sources that the `research` workflow's demo reads.

Three Markdown documents, a PDF and a CSV about urban heat and street trees in Norhaven, a city
that does not exist, whose figures agree with one another. They are package data in the
`corpus/` folder beside this module; its README says which questions they answer, and which
one they deliberately cannot.
"""

from __future__ import annotations

from pathlib import Path

CORPUS_DIR = Path(__file__).with_name("corpus")
"""The folder holding the corpus's files (and its README)."""

CORPUS_FILES = (
    "heat_island_assessment_2024.md",
    "cooler_streets_review.md",
    "heat_and_health_briefing.md",
    "canopy_strategy_2025_2030.pdf",
    "district_temperatures.csv",
)
"""The corpus's file names: the documents first, then the PDF and the data."""

SAMPLE_QUESTION = (
    "Which Norhaven district had the most heat days in 2024, how does its tree canopy compare "
    "with the leafiest district's, and what is the city doing about it? Cite the figures.")
"""The demo's research question. The CSV answers its first part (Eastfield: 43 heat days at
9.8 % canopy; Ashgrove: 13 at 34.6 %) and the documents say the same, and what is planned."""

UNANSWERABLE_QUESTION = (
    "What were the PM2.5 air-pollution levels in Norhaven's districts in 2024?")
"""A question no file of the corpus answers: a report on it should say so, citing nothing."""


def corpus_files() -> list[Path]:
    """The corpus's files in a stable order (`CORPUS_FILES`), without the folder's README."""
    return [CORPUS_DIR / name for name in CORPUS_FILES]
