"""A task's report: where it is, and its forms (Markdown, a safe HTML page, a PDF).

A task has a report when its workflow document names a Markdown result (`result` with no JSON
contract: the file `result_file`, default `<result>.md`) and some step has written it; the
newest version is the report. The PDF is rendered in a process of its own (`PdfRenderer`):
WeasyPrint holds the CPU for a second or two per report and leaves a large heap behind, which
would stall the control plane's event loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import multiprocessing
from collections import OrderedDict
from typing import Any

import sqlalchemy as sa
from fastapi import Request
from fastapi.responses import Response

from shoal.artifacts.store import ArtifactStore
from shoal.reports import Report, render_pdf, report_page
from shoal.store import files as file_rows
from shoal.store.convert import task_from_row
from shoal.workflows.document import WorkflowDocument

# The report page needs no script and loads nothing but images a report links to.
PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; "
                               "img-src http: https:; base-uri 'none'; form-action 'none'; "
                               "frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
}
MARKDOWN = "text/markdown; charset=utf-8"
_CACHED = 8  # PDFs kept, newest used


async def report_of(conn: Any, row: sa.Row[Any], artifacts: ArtifactStore, *,
                    public: bool = False) -> Report | None:
    """The report of the task in `row`, or None while it has none. `public`: for a share
    link, which tells nothing of the task but its report and date."""
    task = task_from_row(row)
    if task.meta.workflow is None:
        return None
    name = WorkflowDocument.model_validate(task.meta.workflow).result_filename
    sha = await file_rows.newest_version(conn, task.id, name)
    if sha is None:
        return None
    markdown = (await artifacts.read(sha)).decode("utf-8", errors="replace")
    if public:
        return Report(title=_first_heading(markdown) or "Report", markdown=markdown,
                      created_at=task.created_at, task_id=None)
    return Report(title=task.description, markdown=markdown, created_at=task.created_at,
                  task_id=task.id, subtitle=f"The {task.workflow} workflow")


def _first_heading(markdown: str) -> str | None:
    for line in markdown.splitlines():
        if line.startswith("# "):
            return line[2:].strip() or None
    return None


def wants_html(request: Request) -> bool:
    """Whether the client prefers HTML to Markdown (`Accept`, with its q-values)."""
    best: dict[str, float] = {}
    for part in request.headers.get("accept", "").split(","):
        kind, *params = (p.strip() for p in part.split(";"))
        q = next((_q(p[2:]) for p in params if p.startswith("q=")), 1.0)
        best[kind.lower()] = max(best.get(kind.lower(), 0.0), q)
    html = max(best.get("text/html", 0.0), best.get("application/xhtml+xml", 0.0))
    markdown = max(best.get("text/markdown", 0.0), best.get("text/plain", 0.0),
                   best.get("text/*", 0.0), best.get("*/*", 0.0))
    return html > markdown


def _q(value: str) -> float:
    try:
        return min(1.0, max(0.0, float(value)))
    except ValueError:
        return 0.0


def page_response(report: Report, *, extra: dict[str, str] | None = None) -> Response:
    """The report as a safe HTML page."""
    return Response(report_page(report), media_type="text/html; charset=utf-8",
                    headers={**PAGE_HEADERS, **(extra or {})})


class PdfRenderer:
    """Renders reports as PDF in one process of its own (started on first use), keeping the
    last few rendered."""

    def __init__(self) -> None:
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None
        self._cache: OrderedDict[Report, bytes] = OrderedDict()
        self._lock = asyncio.Lock()

    async def render(self, report: Report) -> bytes:
        """The PDF of `report`; `Unavailable` when this machine cannot render PDFs."""
        if (pdf := self._cache.get(report)) is not None:
            self._cache.move_to_end(report)
            return pdf
        async with self._lock:  # one at a time: a second request for the same waits for it
            if (pdf := self._cache.get(report)) is None:
                if self._pool is None:
                    self._pool = concurrent.futures.ProcessPoolExecutor(
                        max_workers=1, mp_context=multiprocessing.get_context("spawn"))
                pdf = await asyncio.get_running_loop().run_in_executor(
                    self._pool, render_pdf, report)
                self._cache[report] = pdf
                while len(self._cache) > _CACHED:
                    self._cache.popitem(last=False)
        return pdf

    def close(self) -> None:
        """Stop the rendering process."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
