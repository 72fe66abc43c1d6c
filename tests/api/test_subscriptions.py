"""A socket's memory of what it sent: subscriptions made one after another without a `since`,
each starting where `resume_point` says and skipping what `has_sent` says, send every event
at most once, and the last one gets all of its task's events after the resume point."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.api.subscriptions import Interest, Sent

TASKS = [uuid.UUID(int=i) for i in range(1, 4)]
TYPES = ["task_update", "subtask_update", "agent_log"]


def _event(seq: int, task: uuid.UUID, kind: str) -> dict[str, object]:
    return {"seq": seq, "type": kind, "data": {"task_id": str(task)}}


log_entries = st.lists(st.tuples(st.sampled_from(TASKS), st.sampled_from(TYPES)),
                       min_size=1, max_size=60)
interests = st.builds(
    Interest,
    types=st.frozensets(st.sampled_from(TYPES), min_size=1),
    task_id=st.one_of(st.none(), st.sampled_from(TASKS)),
)


@settings(max_examples=400, deadline=None)
@given(entries=log_entries, origin=st.integers(0, 20),
       streams=st.lists(st.tuples(interests, st.integers(0, 60)), max_size=6),
       last=st.sampled_from(TASKS))
def test_subscriptions_without_since_send_each_event_once_and_miss_none(
    entries: list[tuple[uuid.UUID, str]], origin: int,
    streams: list[tuple[Interest, int]], last: uuid.UUID,
) -> None:
    """Streams of any interests, each cut off anywhere, then one for a whole task: no event
    is sent twice, and that task's every event after the origin has been sent."""
    log = [_event(seq, task, kind) for seq, (task, kind) in enumerate(entries, start=1)]
    sent = Sent()
    counts: dict[int, int] = {}
    for interest, cut in [*streams, (Interest(frozenset(TYPES), last), len(log))]:
        start = sent.resume_point(interest, origin)
        span = sent.open(interest, start)
        for event in log[start:cut]:
            if interest.wants(event) and not sent.has_sent(event):
                counts[event["seq"]] = counts.get(event["seq"], 0) + 1
                sent.record(span, event)
            elif interest.task_id is None or event["data"]["task_id"] == str(interest.task_id):
                sent.record(span, event)  # passed: of its task, not of its types
    assert all(n == 1 for n in counts.values()), counts
    wanted = {e["seq"] for e in log[origin:] if e["data"]["task_id"] == str(last)}
    assert wanted <= set(counts), sorted(wanted - set(counts))


def test_a_narrower_interest_resumes_where_a_wider_stream_was() -> None:
    """After every task's stream went through seq 7, one task's stream starts after 7."""
    sent = Sent()
    everything = Interest(frozenset(TYPES))
    span = sent.open(everything, 2)
    for seq in range(3, 8):
        sent.record(span, _event(seq, TASKS[seq % 3], "task_update"))
    assert sent.resume_point(Interest(frozenset(TYPES), TASKS[0]), 2) == 7
    assert sent.resume_point(Interest(frozenset(TYPES), TASKS[0]), 1) == 1  # a gap before 2
