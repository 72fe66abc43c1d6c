"""Uploads: files a user brings for their tasks (sources). `POST` takes multipart files (or a
zip of them) and answers their ids, which `POST /api/v1/tasks` takes as `sources`."""

from __future__ import annotations

import asyncio
import uuid
from datetime import datetime
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response
from pydantic import BaseModel
from starlette.datastructures import UploadFile

from shoal.api import uploading
from shoal.api.deps import ServicesDep, UserDep
from shoal.api.errors import error_responses
from shoal.errors import InvalidInput, PayloadTooLarge
from shoal.ids import parse_id
from shoal.store import deletion
from shoal.store import uploads as upload_rows
from shoal.store.models import utcnow

router = APIRouter(prefix="/api/v1/uploads", tags=["uploads"],
                   responses=error_responses(401, 404, 413, 422, 429))
_MULTIPART = {"requestBody": {"required": True, "content": {"multipart/form-data": {"schema": {
    "type": "object", "required": ["file"], "properties": {"file": {
        "type": "array", "items": {"type": "string", "format": "binary"}}}}}}}}


class UploadOut(BaseModel):
    """A source: what it is (sniffed from its content), its size, and its text's length."""

    upload_id: uuid.UUID
    name: str
    kind: str
    size: int
    text_chars: int
    created_at: datetime


class UploadList(BaseModel):
    uploads: list[UploadOut]


@router.post("", status_code=201, response_model=UploadList, openapi_extra=_MULTIPART,
             responses={415: {"description": "A file of a kind Shoal cannot read."}})
async def upload(request: Request, user: UserDep, services: ServicesDep) -> UploadList:
    """Upload files (`file`, one or more; a zip is taken apart): documents (Markdown, text,
    HTML, PDF) and data (CSV, Parquet, SQLite). All are taken, or none."""
    settings = services.settings
    async with request.form(max_files=settings.max_upload_files, max_fields=10) as form:
        files = [f for f in form.getlist("file") if isinstance(f, UploadFile)]
        if not files:
            raise InvalidInput("Send the files as multipart/form-data fields named 'file'.",
                               details=[{"field": "file", "message": "no file was sent"}])
        taken = await asyncio.to_thread(
            uploading.receive, [(f.filename or "", f.file) for f in files],
            services.artifacts, settings)
    try:
        rows = await _store(services, user.user_id, taken)
    except BaseException:
        uploading.discard(taken)
        raise
    return UploadList(uploads=[_out(r) for r in rows])


async def _store(services: Any, user_id: uuid.UUID,
                 taken: list[uploading.Taken]) -> list[dict[str, Any]]:
    """Check the user's quota, move the files in, and record them in one transaction."""
    settings, now = services.settings, utcnow()
    rows = [{"id": uuid.uuid4(), "user_id": user_id, "name": t.name, "kind": t.kind.value,
             "size": t.size, "sha256": t.sha256, "text_sha256": t.text_sha256,
             "text_chars": t.text_chars, "created_at": now} for t in taken]
    async with services.db.begin() as conn:
        held = await upload_rows.total_size(conn, user_id)
        adding = sum(t.size for t in taken)
        if held + adding > settings.max_user_upload_bytes:
            raise PayloadTooLarge(
                f"Your uploads would take {held + adding} bytes; you may keep "
                f"{settings.max_user_upload_bytes}. Delete some (DELETE /api/v1/uploads/{{id}}).",
                details={"field": "file", "held": held})
        await asyncio.to_thread(uploading.adopt, taken, services.artifacts)
        await upload_rows.add(conn, rows)
    return rows


@router.get("", response_model=UploadList)
async def list_uploads(user: UserDep, services: ServicesDep) -> UploadList:
    """Your uploads, oldest first."""
    async with services.db.connection() as conn:
        rows = await upload_rows.of_user(conn, user.user_id)
    return UploadList(uploads=[_out(r._mapping) for r in rows])


@router.delete("/{upload_id}", status_code=204, responses=error_responses(409))
async def delete_upload(upload_id: str, user: UserDep, services: ServicesDep) -> Response:
    """Delete an upload no task reads (409 otherwise: delete those tasks first)."""
    uid = parse_id(upload_id, kind="upload")
    async with services.db.begin() as conn:
        row = await upload_rows.remove(conn, user.user_id, uid)
    await services.db.run_write(lambda c: deletion.queue_for_sweep(
        c, [h for h in (row.sha256, row.text_sha256) if h], now=utcnow()))
    services.runtime.files.nudge()
    return Response(status_code=204)


def _out(row: Any) -> UploadOut:
    return UploadOut(upload_id=row["id"], name=row["name"], kind=row["kind"],
                     size=row["size"], text_chars=row["text_chars"],
                     created_at=row["created_at"])

