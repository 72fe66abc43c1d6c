"""After a commit, posted results are acknowledged per worker: one `acks` message to a worker
that understands it, single `ack`s to one that does not, nothing for a result not stored."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

from shoal.errors import Unavailable
from shoal.protocol import TaskResult
from shoal.runtime.dispatch import PendingAcks, acknowledge
from shoal.runtime.fleet import Connection
from shoal.runtime.jobs import Beat, Result

DEADLINE = 5.0
NONE: Any = None


def _worker(*features: str) -> tuple[Connection, list[dict[str, Any]]]:
    sent: list[dict[str, Any]] = []

    async def send(text: str) -> None:
        sent.append(json.loads(text))

    async def close(code: int, reason: str) -> None:
        raise AssertionError("no connection is closed here")

    conn = Connection(worker_id=uuid.uuid4(), machine_id="m", name="w", tools={}, slots=4,
                      send=send, close=close, features=frozenset(features))
    return conn, sent


def _posted(conn: Connection, accepted: bool = True, reason: str | None = None) -> Result:
    msg = TaskResult(attempt_id=uuid.uuid4(), fence=1, status="succeeded")
    job = Result(conn, msg, [], [])
    job.result = lambda: (accepted, reason)
    return job


async def test_acks_are_grouped_per_worker_that_understands_them() -> None:
    new, new_sent = _worker("acks")
    old, old_sent = _worker()
    first, second = _posted(new), _posted(new, False, "lost its lease")
    third, fourth = _posted(old), _posted(old, False, "ended")
    failed = _posted(new)
    failed.error = Unavailable("not stored", retry_after=1)
    undecided = _posted(old)
    undecided.result = None  # never decided: acking it would make the worker drop it

    await acknowledge([first, third, failed, second, undecided, fourth,
                        Beat(new, NONE)])

    def entry(job: Result) -> dict[str, Any]:
        accepted, reason = job.result() if job.result else (None, None)
        return {"attempt_id": str(job.msg.attempt_id), "accepted": accepted,
                "reason": reason}

    assert [m["type"] for m in new_sent] == ["acks"]
    assert [{k: a[k] for k in ("attempt_id", "accepted", "reason")}
            for a in new_sent[0]["acks"]] == [entry(first), entry(second)]
    assert [m["type"] for m in old_sent] == ["ack", "ack"]
    assert [{k: m[k] for k in ("attempt_id", "accepted", "reason")}
            for m in old_sent] == [entry(third), entry(fourth)]


def _noting(send: Any, arrived: asyncio.Event) -> Any:
    async def noted(text: str) -> None:
        await send(text)
        arrived.set()

    return noted


async def _let_loop_run() -> None:
    for _ in range(50):
        await asyncio.sleep(0)


async def test_acks_of_successive_commits_travel_together() -> None:
    """Within `ack_linger`, the results of several commits are acknowledged in one message
    per worker; none is sent before the linger has passed."""
    pending = PendingAcks(linger=0.2)
    wc, sent = _worker("acks")
    first, second, third = _posted(wc), _posted(wc, False, "ended"), _posted(wc)
    clock = asyncio.get_running_loop().time
    start = clock()
    pending.add([first, Beat(NONE, NONE)])
    pending.add([second])
    await _let_loop_run()
    assert sent == [] or clock() - start >= 0.2 * 0.9  # a very slow machine may get there
    arrived = asyncio.Event()
    wc.send = _noting(wc.send, arrived)  # type: ignore[method-assign]
    pending.add([third])
    await asyncio.wait_for(arrived.wait(), DEADLINE)
    assert clock() - start >= 0.2 * 0.9  # the loop's timer may fire a hair early
    assert [m["type"] for m in sent] == ["acks"]
    assert [a["attempt_id"] for a in sent[0]["acks"]] == [
        str(j.msg.attempt_id) for j in (first, second, third)]
    assert [a["accepted"] for a in sent[0]["acks"]] == [True, False, True]


async def test_waiting_acks_are_sent_when_the_runtime_stops() -> None:
    """Stopping does not wait out the linger, and loses no ack."""
    pending = PendingAcks(linger=1.0)
    wc, sent = _worker("acks")
    job = _posted(wc)
    pending.add([job])
    await _let_loop_run()
    assert sent == []  # a second cannot have passed
    await asyncio.wait_for(pending.flush(), DEADLINE)
    assert [a["attempt_id"] for a in sent[0]["acks"]] == [str(job.msg.attempt_id)]
    assert pending.timer is None


async def test_without_a_linger_acks_leave_after_each_commit() -> None:
    """`ack_linger=0` sends each commit's acks as soon as it is stored."""
    pending = PendingAcks(linger=0)
    wc, sent = _worker("acks")
    pending.add([_posted(wc)])
    await _let_loop_run()
    pending.add([_posted(wc)])
    await _let_loop_run()
    assert [len(m["acks"]) for m in sent] == [1, 1]
