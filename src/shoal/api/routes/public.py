"""Shared reports: what a share link opens, without signing in. The only content served to
anyone: the report and its date, nothing else of the task or its owner. Never cached."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from shoal.api.deps import ServicesDep
from shoal.api.errors import ErrorResponse, error_body, error_responses
from shoal.api.reporting import page_response, report_of
from shoal.reports import Report
from shoal.store import shares
from shoal.store.models import utcnow

router = APIRouter(prefix="/s", tags=["shared"], responses=error_responses(404, 429))
NO_STORE = {"Cache-Control": "no-store", "X-Robots-Tag": "noindex"}


async def _shared(services: ServicesDep, token: str) -> Report | None:
    async with services.db.begin() as conn:
        row = await shares.opened_by(conn, token, now=utcnow())
        return None if row is None else await report_of(conn, row, services.artifacts,
                                                        public=True)


def _gone() -> Response:
    """404, not to be cached either: a revoked link must stop working everywhere at once."""
    return ErrorResponse(error_body("not_found", "This link opens nothing: it was revoked, "
                                    "or its report deleted."), status_code=404, headers=NO_STORE)


@router.get("/{token}", response_class=Response, responses={
    200: {"content": {"text/html": {}}, "description": "The shared report, as a page."}})
async def shared_page(token: str, services: ServicesDep) -> Response:
    """A shared report, as a page anyone with the link may read."""
    report = await _shared(services, token)
    return _gone() if report is None else page_response(report, extra=NO_STORE)


@router.get("/{token}/report.pdf", response_class=Response, responses={
    200: {"content": {"application/pdf": {}}, "description": "The shared report as a PDF."},
    **error_responses(503)})
async def shared_pdf(token: str, services: ServicesDep) -> Response:
    """A shared report as a PDF."""
    report = await _shared(services, token)
    if report is None:
        return _gone()
    return Response(await services.pdf.render(report), media_type="application/pdf",
                    headers=NO_STORE)
