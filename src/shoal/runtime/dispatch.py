"""Building and sending the messages that carry work and acknowledgements to workers."""

from __future__ import annotations

import asyncio
import base64
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

import structlog

from shoal.artifacts.store import ArtifactStore
from shoal.config import Settings
from shoal.engine.graph import spending
from shoal.engine.model import AttemptRecord, StepKind, SubtaskRecord, TaskState
from shoal.protocol import (
    BATCH_BYTES,
    Ack,
    BudgetLeft,
    CancelTask,
    FilePayload,
    McpServer,
    UpstreamResult,
    acks_json,
    execute_task_json,
    frames,
)
from shoal.runtime.fleet import Connection
from shoal.runtime.jobs import Job, Result
from shoal.tracing import attempt_traceparent
from shoal.workflows import workflow_for

log = structlog.get_logger(__name__)
Cache = tuple[str, str, int]  # a search index of a source: its path (`.index/…`), sha256, size



async def execute_message(
    state: TaskState, att: AttemptRecord, *, settings: Settings, artifacts: ArtifactStore,
    tools: Sequence[str], guidance: Sequence[str] = (), files_possible: bool = True,
    caches: Sequence[Cache] = (),
) -> str:
    """The `execute_task` message for a freshly dispatched attempt, as JSON.

    `files_possible=False` is the caller's promise that no subtask of the task has files yet,
    which spares looking for them. `caches` are the search indexes of the task's sources that
    earlier tasks produced (`.index/` files, sent while there is room).
    """
    sub = state.subtasks[att.subtask_id]
    target = state.subtasks.get(sub.target_id) if sub.target_id else None
    files = (await _texts(target, artifacts) if target is not None
             and sub.kind in (StepKind.JUDGE, StepKind.REVIEW) else None)
    timeout = settings.planner_timeout if sub.kind is StepKind.EXPAND else settings.subtask_timeout
    options: dict[str, Any] = {"privacy_level": state.task.privacy_level}
    if state.task.meta.permissions is not None:
        options["permissions"] = dict(state.task.meta.permissions)
    options.update(sub.options.to_json())
    options.pop("mcp_servers", None)
    options.pop("output_file", None)
    upstream = await upstream_results(state, sub, artifacts=artifacts,
                                      budget=settings.max_result_bytes,
                                      files_possible=files_possible)
    instructions = workflow_for(state.task).instructions(
        state.task, sub, tools, target=target, files=files,
        guidance=guidance if sub.role == "coder" else ())
    if state.task.meta.sources:
        sent = {f.path for u in upstream for f in u.files}
        given, note = await _sources(state, artifacts, settings.max_result_bytes - sum(
            len(f.content_b64) * 3 // 4 for u in upstream for f in u.files),
            [c for c in caches if c[0] not in sent])
        upstream.append(given)
        instructions = f"{instructions}\n\n{note}"
    return execute_task_json(
        attempt_id=att.id, fence=att.fence, task_id=state.task.id, subtask_id=sub.id,
        role=sub.role, tool=att.tool, name=sub.name, instructions=instructions,
        upstream=upstream,
        timeout=float(options.pop("timeout", timeout)), options=options,
        mcp_servers=[McpServer(**s.to_json()) for s in sub.options.mcp_servers]
        if sub.options.mcp_servers else [],
        output_file=sub.options.output_file,
        traceparent=attempt_traceparent(state.task.id, sub.id),
        budget=_budget_left(state),
    )


async def _sources(state: TaskState, artifacts: ArtifactStore, room: int,
                   caches: Sequence[Cache] = ()) -> tuple[UpstreamResult, str]:
    """The task's sources as files under `sources/` (within `room` bytes; a source too large
    comes as its extracted text, `<name>.txt`), then what room is left of their `caches`, and
    a note for the agent naming the sources."""
    files: list[FilePayload] = []
    lines = []
    for src in state.task.meta.sources:
        sha, path, how = src.sha256, f"sources/{src.name}", ""
        if src.size > room:
            sha, path, how = src.text_sha256, f"sources/{src.name}.txt", " (its text only: " \
                "the file is too large to send)"
        data = await artifacts.read(sha) if sha else b""
        if not sha or len(data) > room:
            lines.append(f"- {src.name} ({src.kind}): too large to send to this worker")
            continue
        room -= len(data)
        files.append(FilePayload(path=path, content_b64=base64.b64encode(data).decode()))
        lines.append(f"- {path} ({src.kind}, {src.size} bytes){how}")
    for path, sha, size in caches:  # a cache: what does not fit is built again on the worker
        if size <= room:
            room -= size
            files.append(FilePayload(path=path, content_b64=base64.b64encode(
                await artifacts.read(sha)).decode()))
    note = ("The user's own files for this task (its sources) are in the workspace:\n"
            + "\n".join(lines))
    return UpstreamResult(subtask_id=state.task.id, name="sources", output="",
                          files=files), note


def _budget_left(state: TaskState) -> BudgetLeft | None:
    """What the task may still spend, for a task with a budget on tokens or cost."""
    budget = state.task.meta.budget
    if budget is None or (budget.tokens is None and budget.cost_usd is None):
        return None
    tokens, cost = spending(state.task, state.attempts.values())
    return BudgetLeft(
        tokens=None if budget.tokens is None else max(0, budget.tokens - tokens),
        cost_usd=None if budget.cost_usd is None else max(0.0, budget.cost_usd - cost))


async def upstream_results(
    state: TaskState, sub: SubtaskRecord, *, artifacts: ArtifactStore, budget: int,
    files_possible: bool = True,
) -> list[UpstreamResult]:
    """Outputs of the direct dependencies, and the files of every ancestor (newest wins)."""
    out: list[UpstreamResult] = []
    direct = set(sub.dependencies)  # `in` on the tuple compares ids one by one in Python
    for dep_id in _ancestors(state, sub, files_possible=files_possible):
        dep = state.subtasks[dep_id]
        output = dep.output
        files: list[FilePayload] = []
        for entry in output.files if output is not None else ():
            if entry.size > budget:
                continue
            budget -= entry.size
            data = await artifacts.read(entry.sha256)
            files.append(FilePayload(path=entry.path,
                                     content_b64=base64.b64encode(data).decode()))
        text = output.text if output is not None and dep_id in direct else ""
        out.append(UpstreamResult(subtask_id=dep.id, name=dep.name, output=text, files=files))
    return out


async def _texts(target: SubtaskRecord, artifacts: ArtifactStore) -> dict[str, str]:
    """The text of `target`'s files (binary files are named, not shown)."""
    texts: dict[str, str] = {}
    for entry in target.output.files[:50] if target.output is not None else ():
        data = await artifacts.read(entry.sha256)
        try:
            texts[entry.path] = data[:200_000].decode("utf-8")
        except UnicodeDecodeError:
            texts[entry.path] = f"(binary file, {len(data)} bytes)"
    return texts


def _ancestors(
    state: TaskState, sub: SubtaskRecord, *, files_possible: bool = True
) -> list[uuid.UUID]:
    """The subtasks `sub` depends on, oldest first: every direct dependency, and the indirect
    ones that have files (an ancestor without files has nothing for `sub`)."""
    subs = state.subtasks
    if len(sub.dependencies) <= 2 and not (files_possible and _any_files(subs.values())):
        # No files anywhere, so only the direct dependencies count, in the order the walk
        # below would reach them: with one or two, the last is always reached first.
        reached = dict.fromkeys(reversed(sub.dependencies))
        return [dep.id for dep in sorted((subs[d] for d in reached if d in subs),
                                         key=_created_at)]
    direct = set(sub.dependencies)
    seen: set[uuid.UUID] = set()
    found: list[SubtaskRecord] = []  # in walk order; the stable sort below keeps it for ties
    stack = list(sub.dependencies)
    while stack:
        sid = stack.pop()
        if sid in seen:
            continue
        seen.add(sid)
        dep = subs.get(sid)
        if dep is None:
            continue
        if sid in direct or has_files(dep):
            found.append(dep)
        stack.extend(dep.dependencies)
    found.sort(key=_created_at)
    return [dep.id for dep in found]


def _created_at(sub: SubtaskRecord) -> Any:
    return sub.created_at


def has_files(sub: SubtaskRecord) -> bool:
    """Whether `sub` produced files."""
    return bool(sub.output and sub.output.files)


def _any_files(subs: Iterable[SubtaskRecord]) -> bool:
    for sub in subs:  # a plain loop: this runs for every dispatch
        output = sub.output
        if output and output.files:
            return True
    return False


def cancel_message(attempt_id: uuid.UUID, reason: str) -> str:
    """The `cancel_task` message, as JSON."""
    return CancelTask(attempt_id=attempt_id, reason=reason).model_dump_json()


async def acknowledge(batch: list[Job]) -> None:
    """Send the acks of the posted results in `batch`: one `acks` message per worker that
    understands it, single `ack`s to others. A result whose job failed gets none."""
    # by id: connections compare by value
    by_worker: dict[int, tuple[Connection, list[tuple[uuid.UUID, bool, str | None]]]] = {}
    for job in batch:
        if not isinstance(job, Result):
            continue
        wc, msg = job.conn, job.msg
        if job.error is not None or job.result is None:  # kept by the worker, re-sent later
            log.warning("runtime.result_not_stored", attempt=str(msg.attempt_id),
                        error=str(job.error))
            continue
        accepted, reason = job.result()
        by_worker.setdefault(id(wc), (wc, []))[1].append((msg.attempt_id, accepted, reason))
    for wc, acks in by_worker.values():
        if "acks" in wc.features:
            await send_to(wc, acks_json(acks))
            continue
        for aid, accepted, reason in acks:
            await send_to(wc, Ack(attempt_id=aid, accepted=accepted,
                                  reason=reason).model_dump_json())


class PendingAcks:
    """Acks of stored results, sent once `linger` seconds have passed since the first of them
    was queued, together with those queued meanwhile: one message per worker instead of one
    per commit, which on a chain of short subtasks is one per subtask (ADR 0020)."""

    def __init__(self, linger: float) -> None:
        self.linger = linger
        self._jobs: list[Job] = []
        self.timer: asyncio.TimerHandle | None = None
        self._sends: set[asyncio.Task[None]] = set()

    def add(self, batch: list[Job]) -> None:
        """Queue the acks of the results in a committed `batch` (0 linger: send them now)."""
        self._jobs.extend(job for job in batch if isinstance(job, Result))
        if not self._jobs or self.timer is not None:
            return
        if self.linger <= 0:
            self._send()
            return
        self.timer = asyncio.get_running_loop().call_later(self.linger, self._send)

    def _send(self) -> None:
        self.timer = None
        jobs, self._jobs = self._jobs, []
        send = asyncio.create_task(acknowledge(jobs))  # `send_to` only queues: this is quick
        self._sends.add(send)
        send.add_done_callback(self._sends.discard)

    async def flush(self) -> None:
        """Send what still waits (the runtime has stopped) and wait until it is queued."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self._jobs:
            self._send()
        if self._sends:
            await asyncio.wait(self._sends)


async def send_grouped(messages: Sequence[tuple[Connection, str]], kind: str, field: str,
                       limit: int = BATCH_BYTES) -> None:
    """Send each (worker, message): to a worker that understands `batches`, its messages in
    as few `kind` frames of at most `limit` bytes as their size allows (ADR 0024); to others
    one by one, in order."""
    by_worker: dict[int, tuple[Connection, list[str]]] = {}  # by id: connections compare by value
    for wc, text in messages:
        by_worker.setdefault(id(wc), (wc, []))[1].append(text)
    for wc, texts in by_worker.values():
        if "batches" in wc.features and len(texts) > 1:
            texts = [frame for frame, _ in frames(texts, kind, field, limit)]
        for text in texts:
            await send_to(wc, text)


async def send_to(wc: Connection, text: str) -> None:
    """Queue `text` for `wc`; a dead socket is only logged (the lease brings its work back)."""
    try:
        await wc.send(text)
    except Exception as exc:  # a dead socket: the lease will bring the attempt back
        log.info("runtime.send_failed", worker=str(wc.worker_id), error=str(exc))
