"""Your account's data, all of it, as one zip: what you may take with you (and keep) before you
delete tasks or leave."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from fastapi import APIRouter
from fastapi.responses import FileResponse
from starlette.background import BackgroundTask

from shoal.api.deps import ServicesDep, UserDep
from shoal.api.downloads import content_disposition
from shoal.api.errors import error_responses
from shoal.artifacts.store import write_zip
from shoal.errors import NotFound
from shoal.store import accounts, queries
from shoal.store import files as file_rows
from shoal.store import uploads as upload_rows
from shoal.store.events import events_since
from shoal.store.models import utcnow

router = APIRouter(prefix="/api/v1", tags=["account"], responses=error_responses(401, 429))
PAGE = 1000


def _json(value: Any) -> bytes:
    return json.dumps(value, indent=2, default=str, ensure_ascii=False).encode()


@router.get("/export", response_class=FileResponse, responses={
    200: {"content": {"application/zip": {}}, "description": "Everything of yours."}})
async def export(user: UserDep, services: ServicesDep) -> FileResponse:
    """Everything of yours as a zip: your account, each task (its detail, its events as JSON
    lines, its files) and your uploads."""
    members: list[tuple[str, str]] = []
    texts: list[tuple[str, bytes]] = []
    async with services.db.connection() as conn:
        me = await accounts.user_by_id(conn, user.user_id)
        if me is None:
            raise NotFound("This account no longer exists.")
        texts.append(("account.json", _json({
            "username": me.username, "email": me.email, "created_at": me.created_at,
            "max_active_tasks": me.max_active_tasks, "daily_budget": me.daily_budget,
            "exported_at": utcnow()})))
        listed: list[dict[str, Any]] = []
        offset = 0
        while page := (await queries.list_tasks(conn, user_id=user.user_id, status=None,
                                                limit=PAGE, offset=offset))[0]:
            for row in page:
                listed.append(await _task(conn, row, user.user_id, members, texts))
            offset += PAGE
        texts.append(("tasks.json", _json(listed)))
        sources = await upload_rows.of_user(conn, user.user_id)
    texts.append(("uploads.json", _json([{"upload_id": u.id, "name": u.name, "kind": u.kind,
                                          "size": u.size, "created_at": u.created_at}
                                         for u in sources])))
    members += [(f"uploads/{u.id}/{u.name}", u.sha256) for u in sources]
    tmp = Path(tempfile.mkstemp(prefix="shoal-export-", suffix=".zip")[1])
    await write_zip(tmp, members, services.artifacts, texts=texts)
    name = f"shoal-{me.username}-{utcnow():%Y%m%d}.zip"
    return FileResponse(tmp, media_type="application/zip",
                        headers={"Content-Disposition": content_disposition(name)},
                        background=BackgroundTask(lambda: tmp.unlink(missing_ok=True)))


async def _task(conn: Any, row: Any, user_id: Any, members: list[tuple[str, str]],
                texts: list[tuple[str, bytes]]) -> dict[str, Any]:
    """One task into the archive (`tasks/<id>/…`); its line of `tasks.json`."""
    folder = f"tasks/{row.id}"
    summary = {"task_id": row.id, "description": row.description, "status": row.status,
               "workflow": row.workflow, "created_at": row.created_at,
               "completed_at": row.completed_at, "input_tokens": row.input_tokens,
               "output_tokens": row.output_tokens, "cost_usd": row.cost_usd}
    subs = await queries.task_subtasks(conn, row.id)
    texts.append((f"{folder}/task.json", _json({
        **summary, "error": row.error, "metadata": row._mapping["metadata"],
        "subtasks": [{"subtask_id": s.id, "key": s.key, "name": s.name, "kind": s.kind,
                      "status": s.status, "output": s.output, "evaluation": s.evaluation,
                      "review": s.review} for s in subs]})))
    lines: list[bytes] = []
    since = 0
    while batch := await events_since(conn, since, user_id=user_id, task_id=row.id,
                                      limit=PAGE):
        lines += [json.dumps(e.wire(), default=str).encode() for e in batch]
        since = batch[-1].seq
    texts.append((f"{folder}/events.jsonl", b"\n".join(lines)))
    seen: set[str] = set()
    for f in await file_rows.task_files(conn, row.id):
        path = f"{folder}/files/{f.key}/{f.path}"
        if path not in seen:
            seen.add(path)
            members.append((path, f.sha256))
    return summary
