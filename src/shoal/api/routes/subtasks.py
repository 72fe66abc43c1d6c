"""Subtasks: detail with attempts and output, the files each produced, and a file's preview."""

from __future__ import annotations

import uuid
from typing import Any

import sqlalchemy as sa
from fastapi import APIRouter
from fastapi.responses import Response

from shoal.api import previews
from shoal.api.deps import ServicesDep, UserDep
from shoal.api.downloads import content_disposition
from shoal.api.errors import error_responses
from shoal.api.schemas.subtasks import (
    FileEntry,
    FileList,
    FilePreview,
    SubtaskDetail,
    SubtaskSummary,
)
from shoal.artifacts.paths import check_relative_path
from shoal.errors import NotFound
from shoal.ids import parse_id
from shoal.store import files as file_rows
from shoal.store import queries

router = APIRouter(prefix="/api/v1/subtasks", tags=["subtasks"],
                   responses=error_responses(401, 404, 422, 429))


@router.get("/{subtask_id}", response_model=SubtaskDetail)
async def get_subtask(subtask_id: str, user: UserDep, services: ServicesDep) -> SubtaskDetail:
    """A subtask with its output and every attempt."""
    async with services.db.connection() as conn:
        row = await _owned(conn, subtask_id, user.user_id)
        attempts = await queries.subtask_attempts(conn, row.id)
    history = [{"attempt_id": str(a.id), "fence": a.fence, "worker_id": str(a.worker_id),
                "tool": a.tool, "status": a.status, "error": a.error, "usage": a.usage,
                "dispatched_at": a.dispatched_at.isoformat(),
                "finished_at": a.finished_at.isoformat() if a.finished_at else None}
               for a in attempts]
    return SubtaskDetail(**SubtaskSummary.from_row(row).model_dump(), task_id=row.task_id,
                         description=row.description, output=row.output,
                         attempt_history=history)


@router.get("/{subtask_id}/files", response_model=FileList)
async def list_files(subtask_id: str, user: UserDep, services: ServicesDep) -> FileList:
    """The files a subtask produced."""
    async with services.db.connection() as conn:
        row = await _owned(conn, subtask_id, user.user_id)
        entries = await file_rows.subtask_files(conn, row.id)
    return FileList(subtask_id=row.id, files=[
        FileEntry(path=e.path, size=e.size, sha256=e.sha256) for e in entries])


@router.get("/{subtask_id}/files/{path:path}")
async def get_file(subtask_id: str, path: str, user: UserDep, services: ServicesDep) -> Response:
    """One produced file's bytes."""
    wanted = _wanted(path)
    async with services.db.connection() as conn:
        row = await _owned(conn, subtask_id, user.user_id)
        entries = await file_rows.subtask_files(conn, row.id)
    match = next((e for e in entries if e.path == wanted), None)
    if match is None:
        raise NotFound(f"Subtask {subtask_id} produced no file {path!r}.")
    data = await services.artifacts.read(match.sha256)
    return Response(data, media_type=_media_type(wanted),
                    headers={"Content-Disposition": content_disposition(wanted, inline=True),
                             "X-Content-Type-Options": "nosniff"})


@router.get("/{subtask_id}/previews/{path:path}", response_model=FilePreview)
async def preview_file(
    subtask_id: str, path: str, user: UserDep, services: ServicesDep
) -> FilePreview:
    """A produced file highlighted for reading, with its diff against the version written
    before it in the same work (an earlier accepted attempt, or the work a correction fixed)."""
    wanted = _wanted(path)
    async with services.db.connection() as conn:
        row = await _owned(conn, subtask_id, user.user_id)
        versions = await file_rows.file_versions(conn, row.id, row.target_id, wanted)
    at = next((i for i, v in enumerate(versions) if v.subtask_id == row.id), None)
    if at is None:
        raise NotFound(f"Subtask {subtask_id} produced no file {path!r}.")
    latest = versions[at]
    previous = next((v for v in versions[at + 1:] if v.attempt_id != latest.attempt_id), None)
    data = await services.artifacts.read(latest.sha256)
    shown = previews.render(wanted, data)
    changes = None
    if previous is not None:
        before = data if previous.sha256 == latest.sha256 else (
            await services.artifacts.read(previous.sha256))
        changes = previews.diff(wanted, before, data)
    return FilePreview(path=wanted, size=latest.size, sha256=latest.sha256,
                       attempt_id=latest.attempt_id, language=shown.language, html=shown.html,
                       note=shown.note,
                       previous_attempt_id=previous.attempt_id if previous else None,
                       diff_html=changes)


def _wanted(path: str) -> str:
    """An agent-relative file path, or 404 for one that could not be a produced file."""
    try:
        return check_relative_path(path)
    except Exception as exc:
        raise NotFound(f"No file {path!r}.") from exc


def _media_type(path: str) -> str:
    text = (".py", ".md", ".txt", ".json", ".toml", ".yaml", ".yml", ".js", ".ts", ".css",
            ".html", ".sh", ".cfg", ".ini")
    return "text/plain; charset=utf-8" if path.endswith(text) else "application/octet-stream"


async def _owned(conn: Any, subtask_id: str, user_id: uuid.UUID) -> sa.Row[Any]:
    sid = parse_id(subtask_id, kind="subtask")
    row = await queries.get_subtask(conn, sid, user_id=user_id)
    if row is None:
        raise NotFound(f"No subtask {subtask_id}.", details={"subtask_id": subtask_id})
    return row
