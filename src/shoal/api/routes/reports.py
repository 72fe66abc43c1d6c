"""A task's report (Markdown, HTML or PDF) and its share links: public, read-only links to the
report that its owner can revoke at any time."""

from __future__ import annotations

import uuid
from typing import Any

import sqlalchemy as sa
from fastapi import APIRouter, Request
from fastapi.responses import Response
from pydantic import BaseModel

from shoal.api.deps import ServicesDep, UserDep
from shoal.api.downloads import content_disposition
from shoal.api.errors import error_responses
from shoal.api.reporting import MARKDOWN, page_response, report_of, wants_html
from shoal.engine.model import StepKind
from shoal.errors import Conflict, NotFound
from shoal.ids import parse_id
from shoal.reports import Report
from shoal.store import queries, shares
from shoal.store.models import utcnow

router = APIRouter(prefix="/api/v1/tasks", tags=["reports"],
                   responses=error_responses(401, 404, 422, 429))

_REPORT_CONTENT: dict[int | str, dict[str, Any]] = {200: {"content": {
    "text/markdown": {"schema": {"type": "string"}},
    "text/html": {"schema": {"type": "string"}}},
    "description": "The report: Markdown, or a sanitised HTML page when `Accept` prefers it."}}


class ShareOut(BaseModel):
    """A share link. `url` (with its token) is in the answer that creates it, and never again:
    only a hash of the token is kept."""

    share_id: uuid.UUID
    task_id: uuid.UUID
    created_at: Any
    last_used_at: Any = None
    url: str | None = None


class ShareList(BaseModel):
    shares: list[ShareOut]


class CitedSource(BaseModel):
    """One source of a checked report, by its number there: the passage it cites (where it is,
    in the user's terms, its text and the quote the sentence rests on), or the SQL and the
    rows it returned when the check ran it again."""

    number: int
    label: str | None = None
    text: str | None = None
    quote: str | None = None
    sql: str | None = None
    rows: list[dict[str, Any]] | None = None


class CitedSources(BaseModel):
    """What a report's citations cite, as Shoal's citation check found it."""

    sources: list[CitedSource]


async def _report(services: Any, task_id: str, user_id: uuid.UUID) -> Report:
    tid = parse_id(task_id, kind="task")
    async with services.db.connection() as conn:
        row = await queries.get_task(conn, tid, user_id=user_id)
        if row is None:
            raise NotFound(f"No task {task_id}.", details={"task_id": task_id})
        report = await report_of(conn, row, services.artifacts)
    if report is None:
        raise NotFound("This task has no report (yet): its workflow writes none, or has not "
                       "written it so far.", code="no_report", details={"task_id": task_id})
    return report


@router.get("/{task_id}/report", response_class=Response, responses=_REPORT_CONTENT)
async def get_report(task_id: str, request: Request, user: UserDep,
                     services: ServicesDep) -> Response:
    """The task's report: Markdown, or (`Accept: text/html`) a sanitised page."""
    report = await _report(services, task_id, user.user_id)
    if wants_html(request):
        return page_response(report, extra={"Vary": "Accept"})
    return Response(report.markdown, media_type=MARKDOWN, headers={"Vary": "Accept"})


@router.get("/{task_id}/citations", response_model=CitedSources)
async def get_citations(task_id: str, user: UserDep, services: ServicesDep) -> CitedSources:
    """What each citation of the task's report cites, as its last citation check found it
    (empty until a check has run)."""
    tid = parse_id(task_id, kind="task")
    async with services.db.connection() as conn:
        row = await queries.get_task(conn, tid, user_id=user.user_id)
        if row is None:
            raise NotFound(f"No task {task_id}.", details={"task_id": task_id})
        subs = await queries.task_subtasks(conn, tid)
    done = [s for s in subs if s.kind == StepKind.CHECK and s.status == "completed"
            and isinstance(s.output, dict)]
    last = max(done, key=lambda s: s.completed_at, default=None)
    parsed = last.output.get("parsed") if last is not None else None
    cited = parsed.get("passages") if isinstance(parsed, dict) else None
    return CitedSources(sources=[CitedSource.model_validate({"number": int(n), **value})
                                 for n, value in sorted((cited or {}).items(),
                                                        key=lambda item: int(item[0]))
                                 if str(n).isdigit() and isinstance(value, dict)])


@router.get("/{task_id}/report.pdf", response_class=Response, responses={
    200: {"content": {"application/pdf": {}}, "description": "The report as a PDF."},
    **error_responses(503)})
async def get_report_pdf(task_id: str, user: UserDep, services: ServicesDep) -> Response:
    """The task's report as a PDF (a title page, then the report)."""
    report = await _report(services, task_id, user.user_id)
    pdf = await services.pdf.render(report)
    return Response(pdf, media_type="application/pdf", headers={
        "Content-Disposition": content_disposition(f"report-{report.task_id}.pdf")})


@router.post("/{task_id}/shares", status_code=201, response_model=ShareOut,
             responses=error_responses(409))
async def create_share(task_id: str, request: Request, user: UserDep,
                       services: ServicesDep) -> ShareOut:
    """A public, read-only link to the task's report (409 while it has none)."""
    try:
        report = await _report(services, task_id, user.user_id)
    except NotFound as exc:
        if exc.code != "no_report":
            raise
        raise Conflict(exc.message, code="no_report") from None
    token = shares.new_token()
    async with services.db.begin() as conn:
        row = await shares.create(conn, task_id=_task_id(report), user_id=user.user_id,
                                  token=token, now=utcnow())
    # The address users reach this server at: the configured one, else the one asked.
    base = services.settings.public_url or str(request.base_url)
    return _out(row, url=f"{base.rstrip('/')}/s/{token}")


@router.get("/{task_id}/shares", response_model=ShareList)
async def list_shares(task_id: str, user: UserDep, services: ServicesDep) -> ShareList:
    """The task's share links (their tokens are not shown again)."""
    tid = await _owned(services, task_id, user.user_id)
    async with services.db.connection() as conn:
        rows = await shares.of_task(conn, tid)
    return ShareList(shares=[_out(r) for r in rows])


@router.delete("/{task_id}/shares/{share_id}", status_code=204)
async def revoke_share(task_id: str, share_id: str, user: UserDep,
                       services: ServicesDep) -> Response:
    """Revoke a share link: it opens nothing from now on."""
    tid = await _owned(services, task_id, user.user_id)
    sid = parse_id(share_id, kind="share")
    async with services.db.begin() as conn:
        if not await shares.revoke(conn, task_id=tid, share_id=sid):
            raise NotFound(f"No share link {share_id} of this task.")
    return Response(status_code=204)


async def _owned(services: Any, task_id: str, user_id: uuid.UUID) -> uuid.UUID:
    tid = parse_id(task_id, kind="task")
    async with services.db.connection() as conn:
        if await queries.get_task(conn, tid, user_id=user_id) is None:
            raise NotFound(f"No task {task_id}.", details={"task_id": task_id})
    return tid


def _task_id(report: Report) -> uuid.UUID:
    assert report.task_id is not None  # the owner's view of a report names its task
    return report.task_id


def _out(row: sa.Row[Any], *, url: str | None = None) -> ShareOut:
    return ShareOut(share_id=row.id, task_id=row.task_id, created_at=row.created_at,
                    last_used_at=row.last_used_at, url=url)
