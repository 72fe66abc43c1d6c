"""Keep the cyclic garbage collector's pauses short in a long-running Shoal process (ADR 0019).

A control plane or worker holds a large, long-lived heap once it has started: imported modules,
SQLAlchemy's metadata and compiled statements, Pydantic validators, FastAPI's routes. CPython's
full (generation 2) collection walks all of it: measured at 30 to 107 ms on the control plane in
the middle of a DAG run, a stall every subtask in flight waits out. `settle()`, called once the
process is up, collects what start-up left behind and moves the survivors to the permanent
generation (`gc.freeze()`), so later collections only walk what was made since; and it raises
the young-generation threshold, so the steady stream of short-lived objects (messages, rows,
events) is swept less often.

Reference counting still frees everything that is not in a cycle at once; only cyclic garbage
made before `settle()` is kept, and there is little of it after the collection.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 10_000  # CPython's default is 700 allocations between young collections

_settled = False


def settle() -> None:
    """Freeze the start-up heap out of the collector's way; once per process (later calls,
    e.g. from a second app in a test process, do nothing)."""
    global _settled
    if _settled:
        return
    _settled = True
    gc.collect()
    gc.freeze()
    young, middle, old = gc.get_threshold()
    if young:  # 0 means the collector was switched off on purpose: leave it so
        gc.set_threshold(max(young, YOUNG_THRESHOLD), middle, old)
