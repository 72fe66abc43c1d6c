"""The sample tasks `shoal up --demo` submits (`make run`), one per built-in workflow."""

from __future__ import annotations

SAMPLE_TASK = "Build a CLI todo app with tests"
SAMPLES = {  # workflow → the description of its sample task
    "dag": SAMPLE_TASK,
    "pipeline": "How do city cats change urban wildlife?",
    "supervisor": "Find an Indian restaurant near Taipei 101 and reserve a table for tomorrow "
                  "at 7 PM",
}
