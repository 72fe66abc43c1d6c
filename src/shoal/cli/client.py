"""A small async client for the REST API and its event stream, used by the CLI."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import AsyncIterator, Iterable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from shoal.cli.credentials import Credentials, CredentialStore, normal_url
from shoal.errors import ShoalError, Unauthorized


class ApiError(ShoalError):
    """The server answered with an error."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        super().__init__(str(body.get("message") or f"HTTP {status}"),
                         code=str(body.get("error") or "http_error"),
                         details=body.get("details"))
        self.status = status


NO_SERVER = ("No control plane chosen, and none signed in to. Start one on this machine with "
             "`shoal up` (it signs you in), or sign in to one: shoal login --server URL "
             "(or set SHOAL_URL).")


def chosen_server(server: str | None, store: CredentialStore) -> str | None:
    """Which control plane a command talks to: `--server`, else `SHOAL_URL`, else the one
    signed in to last."""
    # SHOAL_SERVER: the variable's name before SHOAL_URL, still read
    given = server or os.environ.get("SHOAL_URL") or os.environ.get("SHOAL_SERVER")
    found = given or store.default_server()
    return normal_url(found) if found else None


def load_credentials(store: CredentialStore, server: str | None = None,
                     token: str | None = None) -> Credentials:
    """The server (`chosen_server`) and how to sign in to it: `--token`, else `SHOAL_TOKEN`,
    else the session `shoal up` or `shoal login` kept for it."""
    url = chosen_server(server, store)
    if url is None:
        raise Unauthorized(NO_SERVER)
    token = token or os.environ.get("SHOAL_TOKEN")
    if token:
        return Credentials(server=url, token=token)
    kept = store.session(url)
    if kept is None:
        raise Unauthorized(f"Not signed in to {url}. Sign in with: shoal login --server {url}"
                           " (or run `shoal up` there).")
    return kept


async def sign_in(server: str, *, username: str | None = None, password: str | None = None,
                  token: str | None = None) -> Credentials:
    """A new session at `server`: by username and password, by a one-time login link's token
    (`shl_…`), or with an access token as it is (then it is not renewed)."""
    async with httpx.AsyncClient(base_url=server, timeout=30) as http:
        if token is not None and not token.startswith("shl_"):
            pair: dict[str, Any] = {"access_token": token}
        else:
            resp = await (http.post("/api/v1/auth/exchange", json={"token": token}) if token
                          else http.post("/api/v1/auth/login",
                                         json={"username": username, "password": password}))
            pair = _answer(resp)
        me = _answer(await http.get("/api/v1/users/me", headers={
            "Authorization": f"Bearer {pair['access_token']}"}))
    return Credentials(server=server, token=str(pair["access_token"]),
                       refresh_token=pair.get("refresh_token"), username=str(me["username"]))


def _answer(resp: httpx.Response) -> dict[str, Any]:
    """A JSON answer's body; `ApiError` for an error answer."""
    try:
        body = resp.json()
    except ValueError:
        body = {"message": resp.text[:300]}
    if resp.status_code >= 400:
        raise ApiError(resp.status_code, body if isinstance(body, dict) else {})
    return body if isinstance(body, dict) else {}


class ShoalClient:
    """Typed-enough calls to the control plane."""

    def __init__(self, creds: Credentials, *, timeout: float = 30.0,
                 store: CredentialStore | None = None) -> None:
        self.creds = creds
        self._store = store  # where a renewed session is kept; None: never renewed
        self._http = httpx.AsyncClient(
            base_url=creds.server, timeout=timeout,
            headers={"Authorization": f"Bearer {creds.token}"})

    async def __aenter__(self) -> ShoalClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._http.aclose()

    async def renew_if_due(self) -> None:
        """Renew a kept session whose access token ends soon (before each call). A refresh
        token works once: the store renews under its lock and keeps the new pair."""
        if self._store is None or not self.creds.refresh_token or not self.creds.expires_soon():
            return
        self.creds = await self._store.renew(self.creds, self._refreshed)
        self._http.headers["Authorization"] = f"Bearer {self.creds.token}"

    async def _refreshed(self, stale: Credentials) -> Credentials:
        resp = await self._http.post("/api/v1/auth/refresh",
                                     json={"refresh_token": stale.refresh_token})
        try:
            pair = _answer(resp)
        except ApiError as exc:
            if exc.status != 401:
                raise
            why = exc.message.removesuffix(" Sign in again.")
            raise Unauthorized(f"Your session at {stale.server} has ended: {why} Sign in "
                               f"again: shoal login --server {stale.server}",
                               code=exc.code) from None
        return Credentials(server=stale.server, token=str(pair["access_token"]),
                           refresh_token=str(pair["refresh_token"]), username=stale.username)

    async def request(self, method: str, path: str, **kw: Any) -> Any:
        """Call the API; raise `ApiError` with the server's message on failure."""
        await self.renew_if_due()
        resp = await self._http.request(method, path, **kw)
        if resp.status_code >= 400:
            _answer(resp)
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
        await self.renew_if_due()
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

    async def submit_reading(self, body: dict[str, Any], paths: Sequence[Path]
                             ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """Upload `paths`, then submit `body` reading them as its sources: the task, and the
        uploads. A task refused takes its uploads with it: they are deleted before the
        refusal is raised, so nothing of a refused submission stays behind."""
        uploaded = await self.upload(paths) if paths else []
        if uploaded:
            body = {**body, "sources": [u["upload_id"] for u in uploaded]}
        try:
            return await self.submit(body), uploaded
        except ApiError:
            for made in uploaded:  # a refusal: no task reads them
                with contextlib.suppress(ApiError, httpx.TransportError):
                    await self.request("DELETE", f"/api/v1/uploads/{made['upload_id']}")
            raise

    async def task(self, task_id: str) -> dict[str, Any]:
        """A task's detail."""
        result: dict[str, Any] = await self.request("GET", f"/api/v1/tasks/{task_id}")
        return result

    async def events(self, task_id: str, since: int = 0) -> AsyncIterator[dict[str, Any]]:
        """Follow a task's events (SSE), resuming after `since`."""
        headers = {"Last-Event-ID": str(since)} if since else {}
        await self.renew_if_due()
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
