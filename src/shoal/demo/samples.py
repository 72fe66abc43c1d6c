"""The sample tasks `shoal up --demo` submits (`make run`), one per built-in workflow, and the
sources some of them read (the bundled Norhaven corpus, uploaded first)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from shoal.demo.corpus import SAMPLE_QUESTION, corpus_files

SAMPLE_TASK = "Build a CLI todo app with tests"
SAMPLES = {  # workflow → the description of its sample task
    "dag": SAMPLE_TASK,
    "pipeline": "How do city cats change urban wildlife?",
    "supervisor": "Find an Indian restaurant near Taipei 101 and reserve a table for tomorrow "
                  "at 7 PM",
    "research": SAMPLE_QUESTION,
    "proposal": "Help me write a research proposal on how street trees cool city neighbourhoods.",
}
SAMPLE_ANSWERS: dict[str, tuple[str, ...]] = {
    "proposal": ("MSc in Urban Planning, field: urban climate",
                 "6 months; no travel budget, only public data"),
}
"""Workflow → what the demo answers its questions, in order (`shoal up --demo` answers for the
user; the demo model's interviewer asks the proposal's two)."""
SAMPLE_SOURCES: dict[str, Callable[[], list[Path]]] = {"research": corpus_files}
"""Workflow → the files its sample task reads as sources; the others' sample tasks read none."""


def sample_sources(workflow: str) -> list[Path]:
    """The files the sample task of `workflow` reads as sources (none for most workflows)."""
    files = SAMPLE_SOURCES.get(workflow)
    return files() if files is not None else []


def sample_answer(workflow: str, n: int) -> str:
    """The demo's answer to the `n`-th question (from 0) the sample task of `workflow` asks: the
    last answer again past the end; a placeholder for a workflow with no answers scripted."""
    answers = SAMPLE_ANSWERS.get(workflow, ())
    if not answers:
        return "No further details: go on with what you have."
    return answers[min(max(n, 0), len(answers) - 1)]
