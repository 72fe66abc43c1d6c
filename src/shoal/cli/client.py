"""A small async client for the REST API and its event stream, used by the CLI."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from shoal.errors import ShoalError, Unauthorized

CREDENTIALS_FILE = "credentials.json"


class ApiError(ShoalError):
    """The server answered with an error."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        super().__init__(str(body.get("message") or f"HTTP {status}"),
                         code=str(body.get("error") or "http_error"),
                         details=body.get("details"))
        self.status = status


@dataclass(frozen=True, slots=True)
class Credentials:
    """Where the server is and how to sign in to it."""

    server: str
    token: str


def load_credentials(
    data_dir: Path, server: str | None = None, token: str | None = None
) -> Credentials:
    """Flags win, then `SHOAL_SERVER`/`SHOAL_TOKEN`, then the file `shoal up` or `login` wrote."""
    server = server or os.environ.get("SHOAL_SERVER")
    token = token or os.environ.get("SHOAL_TOKEN")
    path = data_dir / CREDENTIALS_FILE
    if (not server or not token) and path.exists():
        saved = json.loads(path.read_text())
        server = server or saved.get("server")
        token = token or saved.get("access_token")
    if not server or not token:
        raise Unauthorized(
            "No credentials. Run `shoal up` (it signs this machine in), or `shoal login "
            "--server URL --username U`, or set SHOAL_SERVER and SHOAL_TOKEN.")
    return Credentials(server=server.rstrip("/"), token=token)


def save_credentials(data_dir: Path, server: str, access_token: str, refresh_token: str) -> Path:
    """Remember a session for later CLI calls (file readable by the owner only)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / CREDENTIALS_FILE
    path.touch(mode=0o600, exist_ok=True)
    path.write_text(json.dumps({"server": server, "access_token": access_token,
                                "refresh_token": refresh_token}))
    return path


class ShoalClient:
    """Typed-enough calls to the control plane."""

    def __init__(self, creds: Credentials, *, timeout: float = 30.0) -> None:
        self.creds = creds
        self._http = httpx.AsyncClient(
            base_url=creds.server, timeout=timeout,
            headers={"Authorization": f"Bearer {creds.token}"})

    async def __aenter__(self) -> ShoalClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._http.aclose()

    async def request(self, method: str, path: str, **kw: Any) -> Any:
        """Call the API; raise `ApiError` with the server's message on failure."""
        resp = await self._http.request(method, path, **kw)
        if resp.status_code >= 400:
            try:
                body = resp.json()
            except ValueError:
                body = {"message": resp.text[:300]}
            raise ApiError(resp.status_code, body if isinstance(body, dict) else {})
        return resp.json() if resp.content and resp.headers.get(
            "content-type", "").startswith("application/json") else resp.content

    async def upload(self, paths: Iterable[Path]) -> list[dict[str, Any]]:
        """Upload files as sources (streamed from disk); their descriptions, with ids."""
        handles = [path.open("rb") for path in paths]
        try:
            result: dict[str, Any] = await self.request(
                "POST", "/api/v1/uploads",
                files=[("file", (Path(h.name).name, h)) for h in handles])
        finally:
            for handle in handles:
                handle.close()
        return list(result["uploads"])

    async def download(self, path: str, dest: Path) -> int:
        """Save what `path` answers into `dest` (streamed); its size in bytes."""
        async with self._http.stream("GET", path) as resp:
            if resp.status_code >= 400:
                await resp.aread()
                raise ApiError(resp.status_code, resp.json() if resp.headers.get(
                    "content-type", "").startswith("application/json") else {})
            size = 0
            with dest.open("wb") as out:
                async for chunk in resp.aiter_bytes():
                    out.write(chunk)
                    size += len(chunk)
        return size

    async def submit(self, body: dict[str, Any]) -> dict[str, Any]:
        """Submit a task."""
        result: dict[str, Any] = await self.request("POST", "/api/v1/tasks", json=body)
        return result

    async def task(self, task_id: str) -> dict[str, Any]:
        """A task's detail."""
        result: dict[str, Any] = await self.request("GET", f"/api/v1/tasks/{task_id}")
        return result

    async def events(self, task_id: str, since: int = 0) -> AsyncIterator[dict[str, Any]]:
        """Follow a task's events (SSE), resuming after `since`."""
        headers = {"Last-Event-ID": str(since)} if since else {}
        async with self._http.stream("GET", f"/api/v1/tasks/{task_id}/events",
                                     headers=headers, timeout=None) as resp:
            if resp.status_code >= 400:
                await resp.aread()
                raise ApiError(resp.status_code, resp.json())
            async for line in resp.aiter_lines():
                if line.startswith("data: "):
                    yield json.loads(line[6:])

    async def checkpoints(self, status: str | None = None, task_id: str | None = None, *,
                          limit: int = 50) -> dict[str, Any]:
        """A page of your checkpoints, newest first (`status="pending_review"`: the open ones)."""
        params: dict[str, Any] = {"limit": limit}
        params |= {k: v for k, v in (("status", status), ("task_id", task_id)) if v}
        result: dict[str, Any] = await self.request("GET", "/api/v1/checkpoints", params=params)
        return result

    async def checkpoint(self, checkpoint_id: str) -> dict[str, Any]:
        """One checkpoint: why it opened, the scores, what was done and what comes next."""
        result: dict[str, Any] = await self.request(
            "GET", f"/api/v1/checkpoints/{quote(checkpoint_id, safe='')}")
        return result

    async def approve(self, checkpoint_id: str) -> dict[str, Any]:
        """Accept the work so far; the task continues."""
        return await self._decide(checkpoint_id, "approve", None)

    async def reject(self, checkpoint_id: str, reason: str = "") -> dict[str, Any]:
        """Reject the work: the task is cancelled."""
        return await self._decide(checkpoint_id, "reject", {"reason": reason})

    async def correct(
        self, checkpoint_id: str, *, correction_type: str, guidance: str,
        subtask_id: str | None = None, reference_files: Iterable[str] = (),
        apply_to_future: bool = False,
    ) -> dict[str, Any]:
        """Send a subtask back with guidance; it re-executes and is evaluated again."""
        body: dict[str, Any] = {"correction_type": correction_type, "guidance": guidance,
                                "reference_files": list(reference_files),
                                "apply_to_future": apply_to_future}
        if subtask_id:
            body["subtask_id"] = subtask_id
        return await self._decide(checkpoint_id, "correct", body)

    async def _decide(self, checkpoint_id: str, action: str,
                      body: dict[str, Any] | None) -> dict[str, Any]:
        result: dict[str, Any] = await self.request(
            "POST", f"/api/v1/checkpoints/{quote(checkpoint_id, safe='')}/{action}",
            **({"json": body} if body is not None else {}))
        return result
