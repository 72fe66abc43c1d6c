"""The set's questions run end to end: each a `research` task on a control plane, reading the
set's files, scored from its detail and its report.

The files are uploaded once and every task reads them. A task runs unattended, as `shoal up
--demo` runs its sample: a checkpoint is approved, a question to the user is answered
`NO_DETAILS`. A task still running after `deadline` seconds is cancelled and scored as it
stands. At most `parallel` tasks run at once (the user's active-task limit queues the rest).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from shoal.errors import ShoalError
from shoal.evals.research.goldset import GoldSet, Question
from shoal.evals.research.judge import Judge
from shoal.evals.research.reading import ForeignTerms
from shoal.evals.research.scores import QuestionScore, score_question

WORKFLOW = "research"
ENDED = frozenset({"completed", "failed", "cancelled", "budget_exceeded"})
WAITING = frozenset({"checkpoint_pending", "awaiting_input"})
NO_DETAILS = "No further details: go on with what you have."
POLL = 0.5  # seconds between looks at a running task
DEADLINE = 900.0  # seconds a task may run before it is cancelled


class Api(Protocol):
    """What the runs need of a control plane (`shoal.cli.client.ShoalClient` is one): an
    error answer is a `ShoalError` whose `status` is the HTTP status."""

    async def request(self, method: str, path: str, **kw: Any) -> Any: ...

    async def upload(self, paths: Iterable[Path]) -> list[dict[str, Any]]: ...


Progress = Callable[[str, str], None]
"""Told (question id, what happened: "submitted <task>", a status, or "scored")."""


@dataclass(frozen=True, slots=True)
class Ended:
    """A task as it ended: its status, how long it ran, its detail and its report."""

    task_id: str
    status: str
    seconds: float
    detail: dict[str, Any]
    report: str | None


async def run_set(api: Api, gold: GoldSet, *, terms: ForeignTerms, parallel: int = 2,
                  tools: Sequence[str] = (), judge: Judge | None = None,
                  progress: Progress | None = None,
                  deadline: float = DEADLINE) -> list[QuestionScore]:
    """Every question of `gold` run and scored, in the set's order; `tools`: the tools the
    tasks prefer (as `shoal submit --tool`)."""
    told = progress or (lambda _q, _what: None)
    uploaded = await api.upload(gold.files)
    sources = [str(u["upload_id"]) for u in uploaded]
    slots = asyncio.Semaphore(max(1, parallel))

    async def one(question: Question) -> QuestionScore:
        async with slots:
            ended = await run_question(api, question, sources, tools=tools, progress=told,
                                       deadline=deadline)
        score = score_question(question, task_id=ended.task_id, status=ended.status,
                               seconds=ended.seconds, detail=ended.detail, report=ended.report,
                               terms=terms)
        if judge is not None and ended.report is not None:
            score = await _judged(judge, question, score, ended.report)
        told(question.id, "scored")
        return score

    try:
        async with asyncio.TaskGroup() as tg:
            running = [tg.create_task(one(q)) for q in gold.questions]
    except* ShoalError as refused:  # a refusal says what to do: said once, not as a group
        raise refused.exceptions[0] from None
    return [t.result() for t in running]


async def run_question(api: Api, question: Question, sources: list[str], *,
                       progress: Progress, tools: Sequence[str] = (),
                       deadline: float = DEADLINE) -> Ended:
    """Submit `question` as a research task reading `sources` and see it to its end."""
    body: dict[str, Any] = {"workflow": WORKFLOW, "description": question.text,
                            "sources": sources}
    if tools:
        body["tool_preferences"] = list(tools)
    created = await api.request("POST", "/api/v1/tasks", json=body)
    task_id = str(created["task_id"])
    progress(question.id, f"submitted {task_id}")
    started, status = time.monotonic(), ""
    while True:
        detail: dict[str, Any] = await api.request("GET", f"/api/v1/tasks/{task_id}")
        if detail["status"] != status:
            status = str(detail["status"])
            progress(question.id, status)
        if status in ENDED:
            break
        if time.monotonic() - started > deadline:
            await _cancel(api, task_id)
        elif status in WAITING:
            await _decide_open(api, task_id)
        await asyncio.sleep(POLL)
    return Ended(task_id, status, time.monotonic() - started, detail,
                 await _report(api, task_id))


async def _decide_open(api: Api, task_id: str) -> None:
    """Approve the task's open checkpoints, and answer its questions `NO_DETAILS`."""
    page = await api.request("GET", "/api/v1/checkpoints",
                             params={"task_id": task_id, "status": "pending_review"})
    for checkpoint in page.get("checkpoints", []):
        cid = checkpoint["checkpoint_id"]
        try:
            if checkpoint.get("reason") == "question":
                await api.request("POST", f"/api/v1/checkpoints/{cid}/answer",
                                  json={"answer": NO_DETAILS})
            else:
                await api.request("POST", f"/api/v1/checkpoints/{cid}/approve")
        except ShoalError as exc:
            if getattr(exc, "status", None) != 409:  # decided meanwhile: nothing to do
                raise


async def _cancel(api: Api, task_id: str) -> None:
    try:
        await api.request("POST", f"/api/v1/tasks/{task_id}/cancel")
    except ShoalError as exc:
        if getattr(exc, "status", None) != 409:  # it ended meanwhile
            raise


async def _report(api: Api, task_id: str) -> str | None:
    """The task's report as Markdown, or None when it has none."""
    try:
        body = await api.request("GET", f"/api/v1/tasks/{task_id}/report",
                                 headers={"Accept": "text/markdown"})
    except ShoalError as exc:
        if getattr(exc, "status", None) == 404:
            return None
        raise
    return body.decode("utf-8") if isinstance(body, bytes) else str(body)


async def _judged(judge: Judge, question: Question, score: QuestionScore,
                  report: str) -> QuestionScore:
    """`score` with the judge's verdict on each answerable part."""
    answerable = [p for p in question.parts if p.answerable]
    verdicts = dict(zip([p.id for p in answerable], await judge.verdicts(answerable, report),
                        strict=True))
    return replace(score, parts=tuple(replace(p, judged=verdicts[p.part])
                                      if p.part in verdicts else p for p in score.parts))
