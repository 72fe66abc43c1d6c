"""After a commit, posted results are acknowledged per worker: one `acks` message to a worker
that understands it, single `ack`s to one that does not, nothing for a result not stored."""

from __future__ import annotations

import json
import uuid
from typing import Any

from shoal.errors import Unavailable
from shoal.protocol import TaskResult
from shoal.runtime.batch import Job
from shoal.runtime.dispatch import acknowledge
from shoal.runtime.fleet import Connection


def _worker(*features: str) -> tuple[Connection, list[dict[str, Any]]]:
    sent: list[dict[str, Any]] = []

    async def send(text: str) -> None:
        sent.append(json.loads(text))

    async def close(code: int, reason: str) -> None:
        raise AssertionError("no connection is closed here")

    conn = Connection(worker_id=uuid.uuid4(), machine_id="m", name="w", tools={}, slots=4,
                      send=send, close=close, features=frozenset(features))
    return conn, sent


def _posted(conn: Connection, accepted: bool = True, reason: str | None = None) -> Job:
    msg = TaskResult(attempt_id=uuid.uuid4(), fence=1, status="succeeded")
    job = Job("result", (conn, msg, [], []))
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
                        Job("heartbeat", None)])

    def entry(job: Job) -> dict[str, Any]:
        accepted, reason = job.result() if job.result else (None, None)
        return {"attempt_id": str(job.payload[1].attempt_id), "accepted": accepted,
                "reason": reason}

    assert [m["type"] for m in new_sent] == ["acks"]
    assert [{k: a[k] for k in ("attempt_id", "accepted", "reason")}
            for a in new_sent[0]["acks"]] == [entry(first), entry(second)]
    assert [m["type"] for m in old_sent] == ["ack", "ack"]
    assert [{k: m[k] for k in ("attempt_id", "accepted", "reason")}
            for m in old_sent] == [entry(third), entry(fourth)]
