"""Copies share their workers (ADR 0039): a task driven by copy "a" runs on the worker connected
to copy "b"; the worker's frames reach "a" through "b", its results are fenced by "a" as if it
were connected there; a worker that reconnects mid-attempt reports it to the owner, and when the
owner dies the copy that takes its task over accepts the result itself. Nothing runs twice."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

from shoal.bus import keys
from shoal.runtime.relay import FromWorker, Refused, ToWorker, WorkerCard
from tests.runtime.harness import GatedEcho, submit, subtask_detail, wait_for_status, wait_until
from tests.runtime.test_claims import two_copies

CHAIN = [{"name": "plan", "description": "echo one", "tool": "echo"},
         {"name": "left", "description": "echo two", "tool": "echo", "dependencies": ["plan"]},
         {"name": "right", "description": "echo three", "tool": "echo", "dependencies": ["plan"]},
         {"name": "join", "description": "echo four", "tool": "echo",
          "dependencies": ["left", "right"]}]
GATED = [{"name": "slow", "description": "echo slowly", "tool": "echo",
          "options": {"gated": True}}]


async def attempts_of(client: Any, detail: dict[str, Any]) -> list[dict[str, Any]]:
    """Every attempt of every subtask of a task detail."""
    return [a for s in detail["subtasks"]
            for a in (await subtask_detail(client, s["subtask_id"]))["attempt_history"]]


async def test_a_task_runs_on_a_worker_connected_to_the_other_copy(
    database_url: str, redis_url: str, tmp_path: Path,
) -> None:
    async with two_copies(database_url, tmp_path, claim_ttl=3.0, redis_url=redis_url) as pair:
        [worker] = pair.b.services.runtime.fleet.connections()
        assert len(pair.a.services.runtime.fleet) == 0  # none connected to "a" itself
        task_id = await submit(pair.client_a, CHAIN)
        detail = await wait_for_status(pair.client_a, task_id, "completed", "failed")
        assert detail["status"] == "completed", detail
        attempts = await attempts_of(pair.client_a, detail)
        assert [a["status"] for a in attempts] == ["succeeded"] * 4  # once each, none lost
        assert {a["worker_id"] for a in attempts} == {str(worker.worker_id)}
        assert (await pair.claim(task_id)).owner == "a"  # "a" drove it throughout
        assert not pair.held_by_b(task_id)


async def test_a_worker_that_reconnects_mid_attempt_reports_to_the_owner(
    database_url: str, redis_url: str, tmp_path: Path,
) -> None:
    """The worker's socket to "b" drops while it runs "a"'s attempt; it reconnects (to "b",
    which forgot what it passed on) still running it: "b" finds the owner in the store, the
    heartbeats keep the lease, and the result is accepted by "a" — one attempt, not two."""
    tool = GatedEcho()
    async with two_copies(database_url, tmp_path, claim_ttl=3.0, redis_url=redis_url,
                          worker_tools={"echo": tool}) as pair:
        task_id = await submit(pair.client_a, GATED)
        await asyncio.wait_for(tool.started.wait(), 20)
        fleet = pair.b.services.runtime.fleet
        [first] = fleet.connections()
        await first.close(4000, "dropped by the test")

        async def rejoined() -> bool:
            return any(c is not first and c.via is None for c in fleet.connections())

        await wait_until(rejoined, what="the worker to reconnect to b")
        tool.gate.set()
        detail = await wait_for_status(pair.client_a, task_id, "completed", "failed")
        assert detail["status"] == "completed", detail
        assert [a["status"] for a in await attempts_of(pair.client_a, detail)] == ["succeeded"]
        assert tool.runs == 1
        assert (await pair.claim(task_id)).owner == "a"


async def test_the_copy_that_takes_a_dead_owners_task_accepts_the_result(
    database_url: str, redis_url: str, tmp_path: Path,
) -> None:
    """"a" dies while its attempt runs on "b"'s worker; "b" takes the task over once the claim
    expires and accepts the result itself instead of passing it to the dead copy."""
    tool = GatedEcho()
    async with two_copies(database_url, tmp_path, claim_ttl=2.0, redis_url=redis_url,
                          worker_tools={"echo": tool}) as pair:
        task_id = await submit(pair.client_a, GATED)
        await asyncio.wait_for(tool.started.wait(), 20)
        await pair.crash_a()
        await wait_until(lambda: pair.held_by_b(task_id), what="b to take the task over")
        tool.gate.set()
        detail = await wait_for_status(pair.client_b, task_id, "completed", "failed")
        assert detail["status"] == "completed", detail
        assert [a["status"] for a in await attempts_of(pair.client_b, detail)] == ["succeeded"]
        assert tool.runs == 1
        assert (await pair.claim(task_id)).owner == "b"


async def test_a_result_sent_to_the_dead_owner_is_accepted_by_the_copy_that_takes_over(
    database_url: str, redis_url: str, tmp_path: Path,
) -> None:
    """"a" dies and its attempt then finishes on "b"'s worker: the result goes to "a"'s list,
    where nobody reads it, and the worker keeps it unacknowledged. "b" takes the task over,
    asks the worker for it again (`resend_results`) and accepts it: the step is not run twice."""
    import redis.asyncio as aioredis

    tool = GatedEcho()
    async with two_copies(database_url, tmp_path, claim_ttl=2.0, redis_url=redis_url,
                          worker_tools={"echo": tool}) as pair:
        task_id = await submit(pair.client_a, GATED)
        await asyncio.wait_for(tool.started.wait(), 20)
        await pair.crash_a()
        tool.gate.set()
        redis = aioredis.Redis.from_url(redis_url, decode_responses=True)
        try:
            inbox = keys.relay_inbox(pair.b_settings.redis_namespace, "a")

            async def sent_to_the_dead() -> bool:
                return any("task_result" in raw for raw in await redis.lrange(inbox, 0, -1))

            await wait_until(sent_to_the_dead, what="the result to reach the dead copy's list")
        finally:
            await redis.aclose()
        assert not pair.held_by_b(task_id)  # "a"'s claim has not run out yet
        detail = await wait_for_status(pair.client_b, task_id, "completed", "failed")
        assert detail["status"] == "completed", detail
        assert [a["status"] for a in await attempts_of(pair.client_b, detail)] == ["succeeded"]
        assert tool.runs == 1
        assert (await pair.claim(task_id)).owner == "b"


async def test_an_owner_that_finds_a_worker_again_asks_it_for_its_results(
    database_url: str, redis_url: str, tmp_path: Path,
) -> None:
    """A worker new to the owner's fleet (it moved to another copy, or the owner took its task
    over before reading its card) that holds an attempt of the owner's is asked for what it
    still holds: the request, passed on by "b", routes that attempt's result to "a" again even
    though "b" had forgotten whose it was."""
    tool = GatedEcho()
    async with two_copies(database_url, tmp_path, claim_ttl=3.0, redis_url=redis_url,
                          worker_tools={"echo": tool}) as pair:
        task_id = await submit(pair.client_a, GATED)
        await asyncio.wait_for(tool.started.wait(), 20)
        a_fleet = pair.a.services.runtime.fleet
        [worker] = a_fleet.connections()
        [attempt] = worker.running
        b_peers = pair.b.services.runtime._peers
        assert b_peers is not None
        assert b_peers._relayed.pop(attempt) == "a"
        a_fleet.remove(worker)  # as if "a" had never seen it: its next read of the cards does

        async def asked_again() -> bool:
            return b_peers._relayed.get(attempt) == "a"

        await wait_until(asked_again, what='"a" to ask the worker, through "b", again')
        tool.gate.set()
        detail = await wait_for_status(pair.client_a, task_id, "completed", "failed")
        assert detail["status"] == "completed", detail
        assert [a["status"] for a in await attempts_of(pair.client_a, detail)] == ["succeeded"]
        assert tool.runs == 1


async def test_attempts_for_a_worker_not_connected_are_refused_to_their_owner(
    database_url: str, redis_url: str, tmp_path: Path,
) -> None:
    """A frame for a worker that has left "b" starts nothing: "a" is told its attempts were
    not passed on (and places them again: `Decline`), with the reason."""
    import redis.asyncio as aioredis

    async with two_copies(database_url, tmp_path, claim_ttl=3.0, redis_url=redis_url) as pair:
        gone, attempt = uuid.uuid4(), uuid.uuid4()
        frame = ('{"type": "execute_tasks", "tasks": [{"type": "execute_task", '
                 f'"attempt_id": "{attempt}"}}]}}')
        peers = pair.b.services.runtime._peers
        assert peers is not None
        redis = aioredis.Redis.from_url(redis_url, decode_responses=True)
        try:
            inbox = keys.relay_inbox(pair.b_settings.redis_namespace, "nobody")
            await peers.receive(ToWorker(worker_id=gone, owner="nobody", text=frame))
            raw = await redis.lpop(inbox)
        finally:
            await redis.aclose()
        refused = Refused.model_validate_json(raw)
        assert refused.attempts == [attempt]
        assert refused.worker_id == gone
        assert "no longer connected" in refused.reason


async def test_attempts_for_a_full_worker_go_back_to_their_owner(
    database_url: str, redis_url: str, tmp_path: Path,
) -> None:
    """The worker's one slot is taken by "b"'s own attempt when another copy's attempts reach
    "b": "b" passes none of them on, tells their owner the worker is full (`Refused.full`, which
    places them again without spending a try) and rewrites the worker's card at once."""
    import redis.asyncio as aioredis

    tool = GatedEcho()
    async with two_copies(database_url, tmp_path, claim_ttl=3.0, redis_url=redis_url,
                          worker_tools={"echo": tool}, worker_slots=1) as pair:
        await submit(pair.client_b, GATED)
        await asyncio.wait_for(tool.started.wait(), 20)
        [worker] = pair.b.services.runtime.fleet.connections()
        first, second = uuid.uuid4(), uuid.uuid4()
        frame = ('{"type": "execute_tasks", "tasks": ['
                 f'{{"type": "execute_task", "attempt_id": "{first}"}}, '
                 f'{{"type": "execute_task", "attempt_id": "{second}"}}]}}')
        peers = pair.b.services.runtime._peers
        assert peers is not None
        redis = aioredis.Redis.from_url(redis_url, decode_responses=True)
        try:
            inbox = keys.relay_inbox(pair.b_settings.redis_namespace, "nobody")
            await peers.receive(ToWorker(worker_id=worker.worker_id, owner="nobody", text=frame))
            raw = await redis.lpop(inbox)
            card = WorkerCard.model_validate_json(await redis.hget(
                keys.fleet(pair.b_settings.redis_namespace), str(worker.worker_id)))
        finally:
            await redis.aclose()
        refused = Refused.model_validate_json(raw)
        assert (refused.attempts, refused.full) == ([first, second], True)
        assert "no free slot" in refused.reason
        assert len(worker.running) == 1  # "b"'s own attempt alone
        assert (card.running, card.slots) == (1, 1)
        tool.gate.set()


async def test_two_copies_placing_on_one_slot_spend_no_tries(
    database_url: str, redis_url: str, tmp_path: Path,
) -> None:
    """Issue 34's run: one worker with one slot (connected to "b"), each copy given three tasks
    of four parallel steps at once, one try per step: both copies place on the slot at the same
    moments, and what finds it taken is declined and placed again later, so every task
    completes and no attempt failed."""
    async with two_copies(database_url, tmp_path, claim_ttl=3.0, redis_url=redis_url,
                          worker_slots=1, max_attempts=1, retry_delays=[0.1]) as pair:
        plan = [{"name": f"s{i}", "description": f"echo {i}", "tool": "echo",
                 "options": {"delay": 0.02}} for i in range(4)]
        clients = [pair.client_a] * 3 + [pair.client_b] * 3
        task_ids = await asyncio.gather(*(submit(c, plan) for c in clients))
        statuses: list[str] = []
        for client, task_id in zip(clients, task_ids, strict=True):
            detail = await wait_for_status(client, task_id, "completed", "failed")
            assert detail["status"] == "completed", detail
            attempts = await attempts_of(client, detail)
            assert sorted(a["status"] for a in attempts if a["status"] != "declined") == \
                ["succeeded"] * 4
            statuses += [a["status"] for a in attempts]
        print(f"{statuses.count('declined')} declined attempts of {len(statuses)}")


def test_a_result_crosses_copies_without_its_files() -> None:
    """What travels between copies is checked like any input: a card's fields are typed, an
    unknown field is refused."""
    card = WorkerCard(worker_id=uuid.uuid4(), copy_name="b", name="w", machine_id="m",
                      tools={"echo": True}, slots=2, running=1, at=0.0)
    env = FromWorker(card=card, text="{}")
    assert FromWorker.model_validate_json(env.model_dump_json()) == env
    try:
        WorkerCard.model_validate({**card.model_dump(), "extra": 1})
    except ValueError:
        return
    raise AssertionError("an unknown field was accepted")
