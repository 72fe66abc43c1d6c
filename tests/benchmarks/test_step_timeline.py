"""`benchmarks/step_timeline.py` splits every step of a real W2 run at each hand-over, and
leaves the runtime as it found it."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))

from step_timeline import SEGMENTS, measure

from shoal.runtime import batch, core, executes


async def test_each_step_is_split_at_every_hand_over() -> None:
    originals = (core.Runtime.post_result, core.Runtime._process, batch.Batch.commit,
                 executes.Executes.send)
    spans, n = await measure("sqlite", 1)
    assert n == 200
    assert list(spans) == [label for label, _, _ in SEGMENTS]
    for label, values in spans.items():
        assert len(values) >= n - 2, label  # every step but the chain's ends
        # Seconds, each hand-over after the last: the worker stamps `sent` once its write has
        # returned, by when the control plane may have the result already (a little below 0).
        assert all(-0.01 < v < 5 for v in values), (label, min(values), max(values))
        assert sorted(values)[len(values) // 2] > 0, label
    assert (core.Runtime.post_result, core.Runtime._process, batch.Batch.commit,
            executes.Executes.send) == originals
