"""`bench_dag.py --phases` (`benchmarks/_phases.py`): each phase counts its own thread CPU,
less that of the wrapped functions it calls; another thread's calls are not counted; the
functions it wraps exist and are put back; and on a real control plane running a chain every
phase of a step is seen."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from _phases import LOOP_THREAD, PHASES, PhaseClock, phase_clock
from _report import Outcome
from _workloads import Workload, chain
from bench_dag import cluster


def spin(seconds: float) -> None:
    """Use `seconds` of this thread's CPU."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_a_phase_counts_its_own_cpu_less_its_wrapped_callees() -> None:
    clock = PhaseClock()
    inner = clock.wrap("engine", lambda: spin(0.03))

    def outer_body() -> None:
        spin(0.02)
        inner()

    outer = clock.wrap("schedule", outer_body)
    start = time.thread_time()
    outer()
    whole = time.thread_time() - start
    engine, schedule = clock.totals["engine"], clock.totals["schedule"]
    assert engine >= 0.03
    assert schedule >= 0.02
    assert schedule < 0.03  # the inner 30 ms are not counted twice
    assert 0.95 * whole <= engine + schedule <= whole
    clock.reset()
    assert set(clock.snapshot()) == {*PHASES, LOOP_THREAD}
    assert not any(clock.totals.values())


def test_calls_on_another_thread_are_not_counted() -> None:
    clock = PhaseClock()
    work = clock.wrap("rows", lambda: spin(0.02))
    other = threading.Thread(target=work)
    other.start()
    other.join()
    assert clock.totals["rows"] == 0
    work()
    assert clock.totals["rows"] >= 0.02


async def test_a_coroutine_is_timed_by_its_steps_not_while_it_waits() -> None:
    clock = PhaseClock()
    woken = asyncio.Event()

    async def answer() -> int:
        spin(0.01)
        await woken.wait()  # meanwhile another task spins for 50 ms
        spin(0.01)
        return 42

    async def other() -> None:
        spin(0.05)
        woken.set()

    waiting = asyncio.create_task(clock.wrap("after commit", answer)())
    await asyncio.sleep(0)
    await other()
    assert await waiting == 42
    assert 0.02 <= clock.totals["after commit"] < 0.05


async def test_a_timed_coroutine_is_cancelled_as_it_would_be() -> None:
    clock = PhaseClock()
    cleaned = []

    async def forever() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            cleaned.append(True)

    task = asyncio.create_task(clock.wrap("socket out", forever)())
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cleaned == [True]


def test_the_wrapped_functions_exist_and_are_put_back() -> None:
    from shoal.runtime import core
    from shoal.store import fast

    before = (core.decide, fast._sqlite, core.Runtime._after_commit)
    with phase_clock():
        assert core.decide is not before[0]
        assert fast._sqlite is not before[1]
        assert core.Runtime._after_commit is not before[2]
    assert (core.decide, fast._sqlite, core.Runtime._after_commit) == before


@pytest.mark.e2e
@pytest.mark.timeout(240)
async def test_every_phase_of_a_chains_step_is_seen_on_a_real_control_plane() -> None:
    work = Workload("W2", "chain 20", chain(20), 0.0)
    outcome = Outcome(work)
    # Acks at once: with the default linger (20 ms) a chain that runs faster than that (on a
    # fast machine) ends before its first acks go, and a run may see none.
    async with cluster("sqlite", phases=True, settings_update={"ack_linger": 0.0}) as bench:
        for _ in range(2):
            outcome.runs.append(await bench.run(work))
    for run in outcome.runs:
        assert run.status == "task_complete"
        assert run.phases is not None
        seen = {phase for phase in PHASES if run.phases[phase] > 0}
        # Every phase a SQLite chain runs through (PostgreSQL's statement is the other path).
        assert seen >= set(PHASES) - {"statement (PostgreSQL)"}, set(PHASES) - seen
        assert sum(run.phases[p] for p in PHASES) < run.phases[LOOP_THREAD] < run.cpu
