"""Subtasks: detail with attempts and output, and the files each produced."""

from __future__ import annotations

import uuid
from typing import Any

import sqlalchemy as sa
from fastapi import APIRouter
from fastapi.responses import Response

from shoal.api.deps import ServicesDep, UserDep
from shoal.api.downloads import content_disposition
from shoal.api.errors import error_responses
from shoal.api.routes.tasks import subtask_summary
from shoal.api.schemas import FileEntry, FileList, SubtaskDetail
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
    return SubtaskDetail(**subtask_summary(row).model_dump(), task_id=row.task_id,
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
    try:
        wanted = check_relative_path(path)
    except Exception as exc:
        raise NotFound(f"No file {path!r}.") from exc
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
