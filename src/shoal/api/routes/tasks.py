"""Tasks: submit, list, read, cancel, download, and their live event stream (SSE)."""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

import sqlalchemy as sa
from fastapi import APIRouter, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, Response, StreamingResponse
from pydantic import TypeAdapter
from starlette.background import BackgroundTask

from shoal.api import streams
from shoal.api.catalog import misspelt, offered_to
from shoal.api.deps import ServicesDep, UserDep
from shoal.api.downloads import content_disposition
from shoal.api.errors import error_responses
from shoal.api.schemas.subtasks import SubtaskSummary
from shoal.api.schemas.tasks import (
    AttemptSpan,
    AttemptTimeline,
    CitationCheck,
    MessagePage,
    MessageView,
    PlanItem,
    QuestionSummary,
    StateRevision,
    TaskCancelled,
    TaskCreate,
    TaskCreated,
    TaskDetail,
    TaskPage,
    TaskStateView,
    TaskSummary,
    Usage,
    WaveSummary,
)
from shoal.artifacts.store import write_zip
from shoal.engine import planning, quality, waves
from shoal.engine.model import Budget, Deadline, SourceRef, StepKind, TaskMeta, TaskRecord
from shoal.errors import InvalidGraph, InvalidInput, NotFound, RateLimited, Unavailable
from shoal.events import as_json
from shoal.ids import ID_PREFIX, id_range, new_id, parse_id
from shoal.limits import MAX_INT64, value_problem
from shoal.metrics import Metrics, StreamKind
from shoal.states import TaskStatus
from shoal.store import accounts, deletion, queries, slots, usage
from shoal.store import files as file_rows
from shoal.store import uploads as upload_rows
from shoal.store import workers as worker_rows
from shoal.store.convert import subtask_from_row, task_from_row
from shoal.store.models import utcnow
from shoal.workflows import (
    Insert,
    checked_parameters,
    checked_skip,
    checks,
    messages,
    phases,
    questions,
    with_inserted,
)
from shoal.workflows.blackboard import blackboard, state_view
from shoal.workflows.document import WorkflowDocument
from shoal.workflows.event_names import renamer
from shoal.workflows.interpreter import DocumentWorkflow

router = APIRouter(prefix="/api/v1/tasks", tags=["tasks"],
                   responses=error_responses(401, 404, 409, 413, 422, 429, 503))


@router.post("", status_code=201, response_model=TaskCreated)
async def submit_task(body: TaskCreate, user: UserDep, services: ServicesDep) -> TaskCreated:
    """Submit a task: stored and started at once; planning runs on a worker."""
    offered = await offered_to(services, user.user_id, body.workflow)
    if offered is None:
        said, close = await misspelt(services, user.user_id, body.workflow)
        raise _invalid("workflow", f"{said} GET /api/v1/workflows lists them.",
                       kind="unknown_workflow", did_you_mean=close)
    meta = _meta(body)
    flow = DocumentWorkflow(offered.document)
    if body.plan is not None and flow.plan_step() is None:
        raise _invalid("plan", f"the {offered.name} workflow has no expand step that a plan of "
                               "your own could stand for", kind="plan_not_taken")
    try:
        parameters = checked_parameters(offered.document, body.parameters)
        skip = checked_skip(offered.document, body.skip)
        doc = with_inserted(offered.document, [
            Insert(i.after, i.id, i.prompt, tuple(i.tools)) for i in body.insert or ()])
    except InvalidInput as exc:
        raise _invalid(str(exc.details["field"]), exc.message) from None
    meta = replace(meta, parameters=parameters, skip=skip,
                   workflow=doc.model_dump(mode="json", by_alias=True))
    if offered.document.needs_sources and not body.sources:
        raise _invalid("sources", f"the {offered.name} workflow reads your own files: upload "
                                  "them (POST /api/v1/uploads) and give their ids here",
                       kind="sources_required")
    await _within_daily_budget(services, user.user_id)
    sources = await _sources(services, user.user_id, body.sources or [])
    meta = replace(meta, sources=tuple(ref for _, ref in sources))
    plan, options, plan_items = _user_plan(body, services.settings.max_subtasks)
    if not len(services.runtime.fleet) and not await _worker_online_elsewhere(services):
        raise Unavailable(
            "No workers are currently online. Start one with: shoal worker --server "
            f"{services.settings.base_url} --token <token>", code="no_workers_available",
            retry_after=10)
    now = utcnow()
    task = TaskRecord(
        id=new_id(), user_id=user.user_id, description=body.description,
        status=TaskStatus.PENDING, created_at=now, updated_at=now, workflow=body.workflow,
        checkpoint_frequency=body.checkpoint_frequency, privacy_level=body.privacy_level,
        tool_preferences=tuple(body.tool_preferences or ()), meta=meta,
    )
    stored = await services.runtime.submit(
        task, plan, options, plan_items,
        links=upload_rows.link_rows(task.id, [(uid, ref.name) for uid, ref in sources]))
    if stored.status is TaskStatus.QUEUED:
        async with services.db.connection() as conn:
            position = await slots.queue_position(conn, stored.id)
        return TaskCreated(
            task_id=stored.id, status=stored.status.value, queue_position=position,
            message=f"Task queued at position {position}: you have as many tasks running as "
                    "you may; it starts when one of them ends (cancel it to leave the queue).")
    message = ("Task submitted successfully. Running your plan..." if plan else
               "Task submitted successfully. Decomposing into subtasks..." if flow.plans_first()
               else f"Task submitted successfully. Running the {offered.name} workflow...")
    return TaskCreated(task_id=stored.id, status=stored.status.value, message=message)


async def _sources(services: ServicesDep, user_id: uuid.UUID,
                   ids: list[uuid.UUID]) -> list[tuple[uuid.UUID, SourceRef]]:
    """The uploads a task is to read, each yours (422 naming the one that is not)."""
    if not ids:
        return []
    async with services.db.connection() as conn:
        found = {r.id: r for r in await upload_rows.of_user(conn, user_id, ids)}
    out: list[tuple[uuid.UUID, SourceRef]] = []
    for at, uid in enumerate(ids):
        row = found.get(uid)
        if row is None:
            raise _invalid(f"sources.{at}", f"no upload {uid} of yours; POST /api/v1/uploads "
                                            "gives the ids", kind="unknown_upload")
        if any(ref.name == row.name for _, ref in out):
            raise _invalid(f"sources.{at}", f"another source is named {row.name!r} too")
        out.append((uid, SourceRef(row.name, row.kind, row.size, row.sha256,
                                   row.text_sha256 or "")))
    return out


async def _within_daily_budget(services: ServicesDep, user_id: uuid.UUID) -> None:
    """429 until midnight UTC for a user who has spent their daily budget (their own, an
    admin's choice, else the server's setting)."""
    settings, now = services.settings, utcnow()
    async with services.db.connection() as conn:
        row = await accounts.user_by_id(conn, user_id)
        own = row.daily_budget if row is not None else None
        own = own if own is not None else {"tokens": settings.daily_tokens,
                                           "cost_usd": settings.daily_cost_usd}
        most_tokens, most_cost = own.get("tokens"), own.get("cost_usd")
        if most_tokens is None and most_cost is None:
            return
        midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
        tokens, cost = await usage.spent_since(conn, user_id, midnight)
    reached = [f"{tokens} of {most_tokens} tokens"
               if most_tokens is not None and tokens >= most_tokens else "",
               f"${cost:.2f} of ${most_cost}"
               if most_cost is not None and cost >= most_cost else ""]
    if not any(reached):
        return
    resets = midnight + timedelta(days=1)
    wait = (resets - now).total_seconds()
    raise RateLimited(
        f"You have spent your daily budget ({'; '.join(r for r in reached if r)}). It resets at "
        f"midnight UTC, in {int(wait // 3600)} h {int(wait % 3600 // 60)} min; until then new "
        "tasks are refused (running ones go on).", retry_after=wait,
        code="daily_budget_spent", details={"resets_at": resets.isoformat()})


def _invalid(field: str, message: str, *, kind: str = "value_error",
             did_you_mean: list[str] | None = None) -> RequestValidationError:
    """A 422 in the shape of every validation error: `details` names the field, and says
    what kind of problem it is (`type`), so that a client may say it in its own words."""
    extra = {"ctx": {"did_you_mean": did_you_mean}} if did_you_mean is not None else {}
    return RequestValidationError([{"loc": ("body", *field.split(".")), "msg": message,
                                    "type": kind, **extra}])


def _meta(body: TaskCreate) -> TaskMeta:
    """What the task asked for besides its description: requirements and Shoal's settings."""
    deadline = body.checkpoint_deadline
    return TaskMeta(
        requirements={k: v for k, v in (body.requirements or {}).items()
                      if not str(k).startswith("shoal.")},
        # Only what differs from the defaults: a worker of an earlier version knows them all.
        permissions=(body.permissions.model_dump(exclude_defaults=True)
                     if body.permissions is not None else None),
        quality=body.quality != "off",
        checkpoint_deadline=Deadline(deadline.seconds, deadline.action) if deadline else None,
        budget=Budget(**body.budget.model_dump()) if body.budget is not None else None)


async def _worker_online_elsewhere(services: ServicesDep) -> bool:
    """Whether a worker connected to another control-plane copy heartbeated within a lease."""
    since = utcnow() - timedelta(seconds=services.settings.lease_seconds)
    async with services.db.connection() as conn:
        return await worker_rows.any_online(conn, since=since)


_PLAN_ITEMS = TypeAdapter(list[PlanItem])


def _user_plan(
    body: TaskCreate, max_subtasks: int
) -> tuple[planning.Plan | None, tuple[dict[str, Any], ...], tuple[dict[str, Any], ...]]:
    """The plan the user brought, checked as a graph; each of its subtasks' options; and its
    items as sent (kept with the task, should it wait for a slot)."""
    if body.plan is None:
        return None, (), ()
    # Every item dumped in one call, once: read by the planner (which reads the keys it
    # knows), and kept as they are.
    items = _PLAN_ITEMS.dump_python(body.plan, mode="json")
    try:
        plan = planning.user_plan(items, max_subtasks=max_subtasks)
    except InvalidGraph as exc:
        exc.details = {"field": "plan", "problem": exc.details}
        raise
    return plan, tuple([item["options"] for item in items]), tuple(items)


@router.get("", response_model=TaskPage)
async def list_tasks(
    user: UserDep, services: ServicesDep,
    status: Annotated[TaskStatus | None, Query()] = None,
    workflow: Annotated[str | None, Query(pattern=r"^[a-z][a-z0-9_-]{0,39}$")] = None,
    q: Annotated[str | None, Query(max_length=200, description="Words within the "
                                   "description, whatever the case")] = None,
    id_prefix: Annotated[str | None, Query(pattern=ID_PREFIX, description=(
        "Only the tasks whose id starts with this: hex digits, with or without the id's "
        "dashes (`e616b82d`, `e616b82d-c96f`)"))] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 20,
    offset: Annotated[int, Query(ge=0, le=MAX_INT64)] = 0,
) -> TaskPage:
    """The caller's tasks, newest first; filtered by status, workflow, a search and the
    start of their id (how a short id is looked up)."""
    if q is not None and (found := value_problem({"q": q})):
        raise InvalidInput(f"{found[0]}: {found[1]}.", details={"field": found[0]})
    async with services.db.connection() as conn:
        rows, total = await queries.list_tasks(
            conn, user_id=user.user_id, status=status.value if status else None,
            workflow=workflow, search=q.strip() if q and q.strip() else None,
            ids=id_range(id_prefix) if id_prefix else None, limit=limit, offset=offset)
    return TaskPage(tasks=[_summary(r) for r in rows], total=total, limit=limit, offset=offset)


@router.get("/{task_id}/state", response_model=TaskStateView)
async def get_task_state(task_id: str, user: UserDep, services: ServicesDep) -> TaskStateView:
    """A document workflow's blackboard: each entry's revisions, oldest first."""
    async with services.db.connection() as conn:
        row = await _owned(conn, task_id, user.user_id)
        subs = [subtask_from_row(s) for s in await queries.task_subtasks(conn, row.id)]
    task = task_from_row(row)
    if task.meta.workflow is None:
        return TaskStateView(task_id=task.id, workflow=task.workflow, entries={})
    doc = WorkflowDocument.model_validate(task.meta.workflow)
    return TaskStateView(task_id=task.id, workflow=task.workflow,
                         entries={name: [StateRevision(**r) for r in revisions]
                                  for name, revisions in blackboard(doc, subs).items()},
                         state=state_view(doc, task.description, subs))


@router.get("/{task_id}/messages", response_model=MessagePage)
async def get_task_messages(
    task_id: str, user: UserDep, services: ServicesDep,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    offset: Annotated[int, Query(ge=0, le=MAX_INT64)] = 0,
) -> MessagePage:
    """A workflow's message log: every hand-over between its agents and you (a request, an
    output read by a later step, a question, an answer, a delegation, a loop's feedback), in
    order; as they happen, the task's `message` events."""
    async with services.db.connection() as conn:
        row = await _owned(conn, task_id, user.user_id)
        subs = [subtask_from_row(s) for s in await queries.task_subtasks(conn, row.id)]
    task = task_from_row(row)
    found = [] if task.meta.workflow is None else messages.log(
        WorkflowDocument.model_validate(task.meta.workflow), task.description, subs)
    return MessagePage(task_id=task.id, total=len(found), limit=limit, offset=offset,
                       messages=[MessageView(**m.wire())
                                 for m in found[offset:offset + limit]])


@router.get("/{task_id}", response_model=TaskDetail)
async def get_task(task_id: str, user: UserDep, services: ServicesDep) -> TaskDetail:
    """A task with its subtasks."""
    async with services.db.connection() as conn:
        row = await _owned(conn, task_id, user.user_id)
        subs = await queries.task_subtasks(conn, row.id)
        cps, _ = await queries.list_checkpoints(conn, user_id=user.user_id, task_id=row.id,
                                                status=None, limit=100, offset=0)
        position = (await slots.queue_position(conn, row.id)
                    if row.status == TaskStatus.QUEUED else None)
    summaries = [SubtaskSummary.from_row(s) for s in subs]
    return TaskDetail(
        **_summary(row).model_dump(),
        checkpoint_frequency=row.checkpoint_frequency, privacy_level=row.privacy_level,
        tool_preferences=list(row.tool_preferences or []), error=row.error,
        updated_at=row.updated_at, started_at=row.started_at, completed_at=row.completed_at,
        subtasks=summaries,
        checkpoints=[{"checkpoint_id": str(c.id), "status": c.status, "reason": c.reason,
                      "subtask_id": str(c.subtask_id) if c.subtask_id else None,
                      "triggered_at": c.created_at.isoformat(), "decision": c.decision}
                     for c in cps],
        evaluation_scores=quality.mean_scores(
            [s.evaluation for s in summaries if s.kind == StepKind.AGENT and s.evaluation]),
        queue_position=position, **_budget_view(row),
        sources=[{"name": s.name, "kind": s.kind, "size": s.size}
                 for s in task_from_row(row).meta.sources],
        waves=_wave_summary(subs), questions=_questions(subs), citations=_citations(subs),
        **_where(row, subs, cps),
    )


def _citations(subs: list[sa.Row[Any]]) -> CitationCheck | None:
    """The figures of Shoal's citation check, once it has run (None: it has not)."""
    if not any(s.kind == StepKind.CHECK for s in subs):
        return None
    found = checks.figures(subtask_from_row(s) for s in subs if s.kind == StepKind.CHECK)
    return CitationCheck.model_validate(found) if found and "cited" in found else None


def _questions(subs: list[sa.Row[Any]]) -> QuestionSummary | None:
    """A typed plan's sub-questions, answered or gaps (None: it names none)."""
    if not any(isinstance(s.options, dict) and "questions" in s.options for s in subs):
        return None  # the common case: no record built
    found = questions.status(subtask_from_row(s) for s in subs)
    return QuestionSummary.model_validate(questions.summary(found)) if found else None


def _where(row: sa.Row[Any], subs: list[sa.Row[Any]], cps: list[sa.Row[Any]]) -> dict[str, Any]:
    """Where the task is, for a workflow that says it: the phase of a typed plan, the stage
    its document declares."""
    document = task_from_row(row).meta.workflow
    doc = WorkflowDocument.model_validate(document) if document else None
    if doc is None or not (phases.phased(doc) or doc.stages):
        return {}
    records = [subtask_from_row(s) for s in subs]
    status = TaskStatus(row.status)
    found: dict[str, Any] = {}
    if phases.phased(doc):
        found["phase"] = phases.phase_of(
            doc, status, records, [c.reason for c in cps if c.status == quality.PENDING_REVIEW])
    if doc.stages is not None:
        found["stage"] = DocumentWorkflow(doc).runs.stage_now(
            records, completed=status is TaskStatus.COMPLETED)
    return found


def _wave_summary(subs: list[sa.Row[Any]]) -> WaveSummary | None:
    """How a typed plan's waves went, from its subtasks' rows (None: no typed plan)."""
    if not any(isinstance(s.options, dict) and "wave" in s.options for s in subs):
        return None  # the common case: no record built
    found = waves.measure_waves(subtask_from_row(s) for s in subs)
    if found is None:
        return None
    return WaveSummary(count=found.count, parallelism_ratio=found.parallelism_ratio,
                       transitions_ms=list(found.transitions_ms))


def _budget_view(row: sa.Row[Any]) -> dict[str, Any]:
    """A task's budget, as submitted, and what is left of each of its limits."""
    budget = task_from_row(row).meta.budget
    if budget is None:
        return {}
    left: dict[str, Any] = {}
    if budget.tokens is not None:
        left["tokens"] = max(0, budget.tokens - row.input_tokens - row.output_tokens)
    if budget.cost_usd is not None:
        left["cost_usd"] = max(0.0, round(budget.cost_usd - row.cost_usd, 6))
    if budget.seconds is not None:
        ran = ((row.completed_at or utcnow()) - row.started_at).total_seconds() \
            if row.started_at else 0.0
        left["seconds"] = max(0.0, round(budget.seconds - ran, 1))
    return {"budget": budget.to_json(), "budget_remaining": left}


@router.post("/{task_id}/cancel", response_model=TaskCancelled)
async def cancel_task(task_id: str, user: UserDep, services: ServicesDep) -> TaskCancelled:
    """Cancel a task; its running agents are told to stop."""
    tid = parse_id(task_id, kind="task")
    async with services.db.connection() as conn:  # not yours: 404, whichever copy runs it
        await _owned(conn, task_id, user.user_id)
    task = await services.runtime.cancel(tid, user.user_id)
    return TaskCancelled(task_id=task.id, status=task.status.value,
                         message="Task cancelled. All agents stopped.")


@router.delete("/{task_id}", status_code=204)
async def delete_task(task_id: str, user: UserDep, services: ServicesDep) -> Response:
    """Delete an ended task and everything of it: subtasks, events, files no other task has,
    sources no other task reads, share links (409 while it runs or waits: cancel it first)."""
    tid = parse_id(task_id, kind="task")
    deleted = await services.db.run_write(
        lambda conn: deletion.delete_task(conn, tid, user.user_id, now=utcnow()))
    services.runtime.files.nudge()
    services.runtime.forget(deleted.workers, (tid,), deleted.sources)  # the workers' copies
    return Response(status_code=204)


@router.get("/{task_id}/attempts", response_model=AttemptTimeline)
async def task_attempts(task_id: str, user: UserDep, services: ServicesDep) -> AttemptTimeline:
    """Every attempt of the task's steps, with its worker and times: the run's timeline."""
    async with services.db.connection() as conn:
        row = await _owned(conn, task_id, user.user_id)
        found = await queries.task_attempts(conn, row.id)
    return AttemptTimeline(attempts=[AttemptSpan(
        attempt_id=a.id, subtask_id=a.subtask_id, subtask_name=a.subtask_name, kind=a.kind,
        worker_id=a.worker_id, worker_name=a.worker_name, tool=a.tool, status=a.status,
        dispatched_at=a.dispatched_at, started_at=a.started_at, finished_at=a.finished_at)
        for a in found])


@router.get("/{task_id}/subtasks", response_model=list[SubtaskSummary])
async def list_subtasks(task_id: str, user: UserDep, services: ServicesDep) -> list[SubtaskSummary]:
    """A task's subtasks in creation order."""
    async with services.db.connection() as conn:
        row = await _owned(conn, task_id, user.user_id)
        subs = await queries.task_subtasks(conn, row.id)
    return [SubtaskSummary.from_row(s) for s in subs]


@router.get("/{task_id}/download", response_class=FileResponse)
async def download_task(task_id: str, user: UserDep, services: ServicesDep) -> FileResponse:
    """Every file the task's subtasks produced, as one zip."""
    async with services.db.connection() as conn:
        row = await _owned(conn, task_id, user.user_id)
        entries = await file_rows.task_files(conn, row.id)
    members = sorted({e.path: e.sha256 for e in entries}.items())
    tmp = Path(tempfile.mkstemp(prefix="shoal-", suffix=".zip")[1])
    await write_zip(tmp, members, services.artifacts)
    return FileResponse(tmp, media_type="application/zip",
                        headers={"Content-Disposition": content_disposition(f"task-{row.id}.zip")},
                        background=BackgroundTask(lambda: tmp.unlink(missing_ok=True)))


@router.get("/{task_id}/events")
async def task_events(
    task_id: str, request: Request, user: UserDep, services: ServicesDep,
    last_event_id: Annotated[str | None, Header(pattern=r"^\d{1,19}$")] = None,
    since: Annotated[int | None, Query(ge=0, le=MAX_INT64)] = None,
    names: Annotated[Literal["shoal", "workflow"], Query()] = "shoal",
) -> StreamingResponse:
    """Server-sent events for one task; resumes after `Last-Event-ID` (or `?since=`). With
    `names=workflow`, events its workflow names (`events:` in its document) come under those
    names."""
    start = since if since is not None else _last_event_id(last_event_id)
    async with services.db.connection() as conn:
        row = await _owned(conn, task_id, user.user_id)
    stream = streams.replay_then_live_batches(services, user_id=user.user_id, task_id=row.id,
                                              since=start, kind=StreamKind.SSE,
                                              linger=services.settings.sse_linger)
    document = task_from_row(row).meta.workflow if names == "workflow" else None
    if document is not None:
        rename = renamer(WorkflowDocument.model_validate(document).events,
                         f"/api/v1/tasks/{row.id}/report")
        stream = ([rename(item) for item in items] async for items in stream)
    return StreamingResponse(_sse(stream, request, services.runtime.metrics),
                             media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


async def _sse(stream: AsyncIterator[list[dict[str, Any]]], request: Request,
               metrics: Metrics) -> AsyncIterator[str]:
    """The stream's lists of events as SSE, each list in one chunk (one write for a burst).

    A client that goes away ends the response: the server cancels it (ASGI before 2.4) or the
    next write fails (2.4); while nothing is sent, the keep-alive checks."""
    with metrics.open_stream(StreamKind.SSE):
        yield "retry: 2000\n\n"
        # Lists of up to a page of events each: a few ahead keep a slow client's stream
        # bounded, as its bus subscription is (it lags and resyncs beyond that).
        async for items in streams.with_keepalive(stream, interval=15.0, ahead=4):
            if items is None:
                if await request.is_disconnected():
                    return
                yield ": keep-alive\n\n"
                continue
            if items:
                yield "".join(map(_sse_event, items))


def _sse_event(item: dict[str, Any]) -> str:
    """One event as SSE; a live-only event (`agent_token`, seq 0) has no id: it must not move
    Last-Event-ID back."""
    ident = f"id: {item['seq']}\n" if item["seq"] else ""
    return f"{ident}event: {item.get('name') or item['type']}\ndata: {as_json(item)}\n\n"


def _last_event_id(value: str | None) -> int:
    """The sequence number an SSE client resumes after (0 without the header)."""
    if not value:
        return 0
    if int(value) > MAX_INT64:  # the pattern has let through digits only
        raise InvalidInput(
            f"Last-Event-ID must be an event's sequence number, 0 to {MAX_INT64}.",
            code="validation_error", details=[{"field": "header.last-event-id",
                                               "message": "not a sequence number",
                                               "type": "int_range"}])
    return int(value)


async def _owned(conn: Any, task_id: str, user_id: uuid.UUID) -> sa.Row[Any]:
    tid = parse_id(task_id, kind="task")
    row = await queries.get_task(conn, tid, user_id=user_id)
    if row is None:
        raise NotFound(f"No task {task_id}.", details={"task_id": task_id})
    return row


def _summary(row: sa.Row[Any]) -> TaskSummary:
    """A task row in the list's shape (the detail's first fields)."""
    return TaskSummary(task_id=row.id, description=row.description, status=row.status,
                       progress=row.progress, created_at=row.created_at,
                       workflow=row.workflow,
                       usage=Usage(input_tokens=row.input_tokens,
                                   output_tokens=row.output_tokens, cost_usd=row.cost_usd))
