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
        # Seconds. A hand-over between the two processes may come out a little below 0: the
        # worker stamps `sent` once its write has returned, and the control plane `send>` once
        # its own has, by when the other side may have the frame already.
        assert all(-0.01 < v < 5 for v in values), (label, min(values), max(values))
    own = [label for label, start, end in SEGMENTS  # stamped by one process, in order
           if start.startswith("w.") == end.startswith("w.")]
    assert len(own) == 9
    for label in own:
        assert min(spans[label]) >= 0, label
    steps = [sum(step) for step in zip(*spans.values(), strict=True)]
    assert sorted(steps)[len(steps) // 2] > 0  # a step takes time
    assert (core.Runtime.post_result, core.Runtime._process, batch.Batch.commit,
            executes.Executes.send) == originals
