"""At most so many active tasks per user: a task starts holding a free slot, or waits `queued`
and starts, in the order it was submitted, once a slot frees.

The database decides (`store/slots.py`): the slots taken are read from it, not from memory, and
`tasks (user_id, slot)` is unique, so two copies giving the same slot to two tasks cannot both
commit: the loser's batch rolls back and its jobs are retried, reading the slots again. A
slot is picked at random among the free ones, so that copies admitting one user's tasks at the
same moment seldom pick the same one: the lowest free slot was every copy's pick, and under
load a race lost that way cost a batch of results retried job by job, and at last a 503 for
the task submitted (`benchmarks/bench_throughput.py`, three copies).
"""

from __future__ import annotations

import random
import uuid

from shoal.engine import planning
from shoal.engine.inputs import Start
from shoal.engine.model import TaskRecord
from shoal.runtime.batch import Batch, Reader
from shoal.runtime.memory import TaskMemory
from shoal.states import TaskStatus
from shoal.store.slots import UserSlots, queued_count, user_slots


class Admission:
    """Picks slots for new tasks and lets queued ones out. What a batch gave away before it
    commits is kept on the batch (`Batch.slots`, `Batch.queued`)."""

    def __init__(self, memory: TaskMemory, *, default_limit: int, max_subtasks: int) -> None:
        self._memory = memory
        self._default = default_limit
        self._max_subtasks = max_subtasks
        self._rand = random.Random()

    async def _read(self, rd: Reader, user_id: uuid.UUID) -> UserSlots:
        return await user_slots(await rd.conn(), user_id, default_limit=self._default)

    async def slot_for_new(self, rd: Reader, b: Batch, user_id: uuid.UUID) -> int | None:
        """A free slot for a task just submitted, or None: it must wait (no slot is free, or
        older tasks of the user wait already)."""
        found = await self._read(rd, user_id)
        free = [n for n in found.free() if n not in b.slots.get(user_id, ())]
        if found.queue or b.queued.get(user_id) or not free:
            b.queued[user_id] = b.queued.get(user_id, 0) + 1
            return None
        slot = self._rand.choice(free)
        b.slots.setdefault(user_id, set()).add(slot)
        return slot

    async def position_for_new(self, rd: Reader, b: Batch, user_id: uuid.UUID) -> int:
        """The queue position of the task `slot_for_new` just told to wait."""
        return await queued_count(await rd.conn(), user_id) + b.queued.get(user_id, 0)

    async def let_out(self, rd: Reader, b: Batch,
                      user_id: uuid.UUID) -> list[tuple[TaskRecord, Start]]:
        """The queued tasks of `user_id` this copy holds that may start now, each with its
        `Start`: the oldest first, and none past a waiting task another copy holds (that one
        starts first, from there)."""
        found = await self._read(rd, user_id)
        free = [n for n in found.free() if n not in b.slots.get(user_id, ())]
        self._rand.shuffle(free)
        out: list[tuple[TaskRecord, Start]] = []
        for task_id, slot in zip(found.queue, free, strict=False):
            state = self._memory.states.get(task_id)
            if state is None or state.task.status is not TaskStatus.QUEUED or task_id in b.works:
                break
            b.slots.setdefault(user_id, set()).add(slot)
            out.append((state.task, self._start(state.task, slot)))
        return out

    def waiting_users(self) -> set[uuid.UUID]:
        """The users some queued task of whom this copy holds."""
        return {st.task.user_id for st in self._memory.states.values()
                if st.task.status is TaskStatus.QUEUED}

    def _start(self, task: TaskRecord, slot: int) -> Start:
        """The `Start` of a task that waited, with its own plan as it was sent (checked then:
        a limit lowered since does not refuse it now)."""
        items = task.meta.plan
        if not items:
            return Start(slot=slot)
        plan = planning.user_plan([{k: v for k, v in i.items() if k != "options"} for i in items],
                                  max_subtasks=max(self._max_subtasks, len(items)))
        return Start(plan=plan, options=tuple(dict(i.get("options") or {}) for i in items),
                     slot=slot)
