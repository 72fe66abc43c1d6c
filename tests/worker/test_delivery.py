"""How a worker delivers results: acks, batched frames, and the outbox writes that keep
unacknowledged results safe (ADRs 0016, 0020, 0022, 0024)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import structlog
from structlog.testing import LogCapture

from shoal.protocol import (
    Ack,
    Acks,
    ExecuteTask,
    ExecuteTasks,
    ResendResults,
    TaskAccepted,
    TaskResult,
    TaskResults,
    WorkerRegister,
)
from shoal.worker import delivery as delivery_module
from shoal.worker.agent import Worker
from tests.worker.fake_plane import (
    DEADLINE,
    FakeControlPlane,
    GateTool,
    TogetherTool,
    execute,
    make_worker,
    noting_acks,
    on_disk,
    outbox_of,
    running,
)


async def test_one_acks_message_forgets_every_result_it_names(
    plane: FakeControlPlane, gate: GateTool, tmp_path: Path
) -> None:
    """The worker says it understands `acks`; one such message forgets each result it names
    (whether or not its outbox write had begun)."""
    worker = make_worker(plane, tmp_path, gate)
    acked = noting_acks(worker, count=2)
    async with running(worker):
        assert "acks" in (await plane.expect(WorkerRegister)).features
        first, second = execute(), execute()
        await plane.send(first)
        await plane.send(second)
        gate.gate.set()
        results = {(await plane.expect(TaskResult)).attempt_id for _ in range(2)}
        assert results == {first.attempt_id, second.attempt_id}
        await plane.send(Acks(acks=[Ack(attempt_id=first.attempt_id, accepted=True),
                                    Ack(attempt_id=second.attempt_id, accepted=False,
                                        reason="refused")]))
        await asyncio.wait_for(acked.wait(), DEADLINE)
        assert worker.delivery.unacked == {}
    assert on_disk(worker) == []


async def test_only_a_refused_result_is_a_line_of_the_log_at_info(
    plane: FakeControlPlane, gate: GateTool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An accepted result, the usual case, is a debug line (at info a line a result would cost
    the worker more than a short attempt's own work); a refused one says why at info."""
    worker = make_worker(plane, tmp_path, gate)
    acked = noting_acks(worker, count=2)
    # A logger of the test's own at the default level, whatever the process's configuration.
    capture = LogCapture()
    monkeypatch.setattr(delivery_module, "log", structlog.wrap_logger(
        None, processors=[capture], wrapper_class=structlog.make_filtering_bound_logger(
            logging.INFO)))
    async with running(worker):
        await plane.expect(WorkerRegister)
        kept, lost = execute(), execute()
        await plane.send(kept)
        await plane.send(lost)
        gate.gate.set()
        for _ in range(2):
            await plane.expect(TaskResult)
        await plane.send(Acks(acks=[Ack(attempt_id=kept.attempt_id, accepted=True),
                                    Ack(attempt_id=lost.attempt_id, accepted=False,
                                        reason="the attempt lost its lease")]))
        await asyncio.wait_for(acked.wait(), DEADLINE)
    assert [(e["event"], e["attempt_id"], e["reason"]) for e in capture.entries] == [
        ("worker.result_acknowledged", str(lost.attempt_id), "the attempt lost its lease")]


@pytest.mark.parametrize("saved", [False, True], ids=["in memory", "on disk"])
async def test_resend_results_sends_again_only_what_it_holds(
    plane: FakeControlPlane, gate: GateTool, tmp_path: Path, saved: bool
) -> None:
    """`resend_results` (the worker lists `resend`) sends again the named results it still
    holds unacknowledged — from memory, or from its outbox once written — and ignores the
    attempts it does not hold; an ack then forgets it."""
    worker = make_worker(plane, tmp_path, gate)
    acked = noting_acks(worker, count=1)
    async with running(worker):
        assert "resend" in (await plane.expect(WorkerRegister)).features
        run = execute()
        await plane.send(run)
        gate.gate.set()
        first = await plane.expect(TaskResult)
        if saved:
            worker.delivery.save_deferred()
            await asyncio.wait_for(asyncio.gather(*worker.delivery.saving.values()), DEADLINE)
            assert worker.delivery.unacked[run.attempt_id] is None  # only on disk now
        await plane.send(ResendResults(attempt_ids=[execute().attempt_id, run.attempt_id]))
        again = await plane.expect(TaskResult)
        assert again == first
        await plane.send(Ack(attempt_id=run.attempt_id, accepted=True))
        await asyncio.wait_for(acked.wait(), DEADLINE)
    assert on_disk(worker) == []


@contextlib.asynccontextmanager
async def ending_together(
    plane: FakeControlPlane, tmp_path: Path, count: int, *, padding: int = 0,
    **settings: object,
) -> AsyncIterator[tuple[Worker, list[ExecuteTask], WorkerRegister, asyncio.Event]]:
    """A running worker, talking to a control plane that lists `batches`, whose `count`
    attempts (from one `execute_tasks` frame) have just ended in the same turn of its loop.
    Yields the worker, the attempts, its registration and an event set once all are acked."""
    plane.features = ["batches"]
    tool = TogetherTool(expected=count, padding=padding)
    worker = make_worker(plane, tmp_path, tool, slots=count)
    if settings:
        worker.settings = worker.settings.model_copy(update=settings)
    acked = noting_acks(worker, count=count)
    async with running(worker):
        register = await plane.expect(WorkerRegister)
        runs = [execute("together") for _ in range(count)]
        await plane.send(ExecuteTasks(tasks=runs))
        await asyncio.wait_for(tool.all_started.wait(), DEADLINE)
        tool.gate.set()
        yield worker, runs, register, acked


async def test_results_that_end_together_travel_in_one_frame(
    plane: FakeControlPlane, tmp_path: Path
) -> None:
    """To a control plane that lists `batches`, the worker lists it too, starts every attempt
    of an `execute_tasks` frame, and sends the results that are ready in the same turn of its
    event loop as one `task_results` frame (ADR 0024)."""
    async with ending_together(plane, tmp_path, 3) as (worker, runs, register, acked):
        assert "batches" in register.features
        batch = await plane.expect(TaskResults)
        assert {r.attempt_id for r in batch.results} == {r.attempt_id for r in runs}
        assert {r.status for r in batch.results} == {"succeeded"}
        await plane.send(Acks(acks=[Ack(attempt_id=r.attempt_id, accepted=True)
                                    for r in runs]))
        await asyncio.wait_for(acked.wait(), DEADLINE)
        assert worker.delivery.unacked == {}
    assert on_disk(worker) == []


async def test_a_frame_stays_within_the_workers_result_size_limit(
    plane: FakeControlPlane, tmp_path: Path
) -> None:
    """Results that together would exceed `max_result_bytes` (the most one message may carry)
    go in more than one frame; none is lost."""
    # Each result is about 760 bytes of JSON: three do not fit in 1,024.
    async with ending_together(plane, tmp_path, 3, padding=500,
                               max_result_bytes=1024) as (_, runs, _, _):
        got: list[TaskResult] = []
        frames_seen = 0
        while len(got) < 3:
            message = await plane.expect((TaskResult, TaskResults))  # type: ignore[arg-type]
            frames_seen += 1
            if isinstance(message, TaskResults):
                assert len(message.model_dump_json().encode()) <= 1024
            got.extend(message.results if isinstance(message, TaskResults) else [message])
        assert frames_seen >= 2
        assert {r.attempt_id for r in got} == {r.attempt_id for r in runs}


async def test_a_lone_result_goes_out_at_once_as_a_single_message(
    plane: FakeControlPlane, gate: GateTool, tmp_path: Path
) -> None:
    """With nothing else running, a result cannot be joined by another: it is sent as a plain
    `task_result`, even to a control plane that understands batches."""
    plane.features = ["batches"]
    worker = make_worker(plane, tmp_path, gate)
    async with running(worker):
        await _result_sent(plane, gate)  # a `task_result`, or `expect` fails


async def test_result_is_sent_before_its_outbox_write_and_ack_waits_for_it(
    plane: FakeControlPlane, gate: GateTool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A slow disk does not hold the result back; an ack that comes while the write is under
    way waits for it, then removes the record."""
    monkeypatch.setattr(delivery_module, "SAVE_AFTER", 0)  # the write starts right after the send
    worker = make_worker(plane, tmp_path, gate)
    outbox = outbox_of(worker)
    outbox.hold = asyncio.Event()
    async with running(worker):
        await plane.expect(WorkerRegister)
        msg = execute()
        await plane.send(msg)
        await plane.expect(TaskAccepted)
        gate.gate.set()
        result = await plane.expect(TaskResult)
        assert result.attempt_id == msg.attempt_id
        assert not outbox.saved.is_set()  # sent while the write still waits
        await plane.send(Ack(attempt_id=msg.attempt_id, accepted=True))
        outbox.hold.set()
        await asyncio.wait_for(outbox.removed.wait(), DEADLINE)
        assert outbox.saved.is_set()
        assert on_disk(worker) == []


async def test_an_ack_within_save_after_spares_the_outbox_write(
    plane: FakeControlPlane, gate: GateTool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A result acknowledged before SAVE_AFTER has passed is never written to disk."""
    monkeypatch.setattr(delivery_module, "SAVE_AFTER", 60.0)
    worker = make_worker(plane, tmp_path, gate)
    outbox = outbox_of(worker)
    acked = noting_acks(worker)
    async with running(worker):
        await plane.expect(WorkerRegister)
        msg = execute()
        await plane.send(msg)
        gate.gate.set()
        assert (await plane.expect(TaskResult)).attempt_id == msg.attempt_id
        assert msg.attempt_id in worker.delivery.deferred  # waiting for its ack, in memory only
        await plane.send(Ack(attempt_id=msg.attempt_id, accepted=True))
        await asyncio.wait_for(acked.wait(), DEADLINE)
        assert msg.attempt_id not in worker.delivery.unacked
        assert worker.delivery.deferred == {}
        assert worker.delivery.saving == {}
        assert not outbox.saved.is_set()
        assert not outbox.removed.is_set()
        assert on_disk(worker) == []


async def _result_sent(plane: FakeControlPlane, gate: GateTool) -> ExecuteTask:
    """Register, run one attempt to its result, and return the attempt's message."""
    await plane.expect(WorkerRegister)
    msg = execute()
    await plane.send(msg)
    gate.gate.set()
    assert (await plane.expect(TaskResult)).attempt_id == msg.attempt_id
    return msg


async def test_a_dropped_connection_writes_the_results_awaiting_their_ack(
    plane: FakeControlPlane, gate: GateTool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sent but unacknowledged when the connection drops: written at once (not SAVE_AFTER
    later), named as buffered on re-registering, and sent again."""
    monkeypatch.setattr(delivery_module, "SAVE_AFTER", 60.0)
    worker = make_worker(plane, tmp_path, gate)
    async with running(worker):
        msg = await _result_sent(plane, gate)
        plane.refusing = True
        assert plane.connection is not None
        await plane.connection.close()
        await asyncio.wait_for(outbox_of(worker).saved.wait(), DEADLINE)
        assert [r.attempt_id for r in on_disk(worker)] == [msg.attempt_id]
        plane.refusing = False
        assert (await plane.expect(WorkerRegister)).buffered == [msg.attempt_id]
        assert (await plane.expect(TaskResult)).attempt_id == msg.attempt_id


async def test_stopping_writes_the_results_awaiting_their_ack(
    plane: FakeControlPlane, gate: GateTool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker that stops before a result's ack keeps it on disk for its next start."""
    monkeypatch.setattr(delivery_module, "SAVE_AFTER", 60.0)
    worker = make_worker(plane, tmp_path, gate)
    async with running(worker):
        msg = await _result_sent(plane, gate)
        assert on_disk(worker) == []
    assert [r.attempt_id for r in on_disk(worker)] == [msg.attempt_id]
