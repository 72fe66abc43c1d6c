"""Where the command line keeps its sign-ins: one file in the user's config directory
(`$XDG_CONFIG_HOME/shoal/credentials.json` on Linux, via `typer.get_app_dir`), readable by its
owner only, holding a session per control plane (keyed by its URL) and which one is the default.

`shoal up` and `shoal login` write it; every client command reads it, from any folder. A
refresh token works once, so a renewal is a read-modify-write under an exclusive lock on a file
beside it, and every write replaces the file whole (a temporary file, then a rename): two
commands renewing at once renew once, and a crash never leaves half a file.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import tempfile
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jwt
import typer

CREDENTIALS_FILE = "credentials.json"
RENEW_WITHIN_SECONDS = 300  # an access token this close to its end is renewed before use


@dataclass(frozen=True, slots=True)
class Credentials:
    """Where the server is and how to sign in to it: an access token, and the refresh token
    that renews it when there is one (a token given with --token or SHOAL_TOKEN has none)."""

    server: str
    token: str
    refresh_token: str | None = None
    username: str | None = None

    def expires_soon(self, now: datetime | None = None) -> bool:
        """Whether the access token ends within `RENEW_WITHIN_SECONDS` (read from the token;
        its signature is the server's to check). A token that is not a JWT never does."""
        try:
            claims = jwt.decode(self.token, options={"verify_signature": False})
        except jwt.InvalidTokenError:
            return False
        ends = claims.get("exp")
        if not isinstance(ends, int | float):
            return False
        left = ends - (now or datetime.now(UTC)).timestamp()
        return left < RENEW_WITHIN_SECONDS


def normal_url(server: str) -> str:
    """A server URL as sessions are keyed: without a trailing slash."""
    return server.strip().rstrip("/")


def config_dir() -> Path:
    """The user's config directory for Shoal (honours `XDG_CONFIG_HOME`)."""
    return Path(typer.get_app_dir("shoal"))


class CredentialStore:
    """The sessions file: read it, save a session, forget one; every write locked and whole."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or config_dir() / CREDENTIALS_FILE

    def read(self) -> dict[str, Any]:
        """The file's contents (`{"default": url, "servers": {url: session}}`), empty when it
        does not exist or cannot be read as such."""
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {"default": None, "servers": {}}
        if not isinstance(data, dict) or not isinstance(data.get("servers"), dict):
            return {"default": None, "servers": {}}
        return data

    def default_server(self) -> str | None:
        """The server signed in to last (by `shoal up` or `shoal login`)."""
        found = self.read().get("default")
        return str(found) if found else None

    def session(self, server: str) -> Credentials | None:
        """The session kept for `server`, if any."""
        saved = self.read()["servers"].get(normal_url(server))
        if not isinstance(saved, dict) or not saved.get("access_token"):
            return None
        return Credentials(server=normal_url(server), token=str(saved["access_token"]),
                           refresh_token=saved.get("refresh_token"),
                           username=saved.get("username"))

    def save(self, creds: Credentials, *, make_default: bool = True) -> Path:
        """Keep `creds` as the session for its server (the default one too, unless not)."""
        with self.locked():
            self._write_session(creds, make_default=make_default)
        return self.path

    def forget(self, server: str) -> bool:
        """Drop the session for `server`; whether there was one."""
        url = normal_url(server)
        with self.locked():
            data = self.read()
            had = data["servers"].pop(url, None) is not None
            if data.get("default") == url:
                data["default"] = next(iter(data["servers"]), None)
            self._replace(data)
        return had

    async def renew(self, stale: Credentials,
                    refresh: Callable[[Credentials], Awaitable[Credentials]]) -> Credentials:
        """The session for `stale.server` renewed: by another command, if it renewed meanwhile
        (the kept refresh token is no longer `stale`'s), else by `refresh(stale)`, kept."""
        fd = await asyncio.to_thread(self._lock)
        try:
            kept = await asyncio.to_thread(self.session, stale.server)
            if kept is not None and kept.refresh_token != stale.refresh_token:
                return kept
            fresh = await refresh(stale)
            await asyncio.to_thread(self._write_session, fresh, make_default=False)
            return fresh
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the exclusive lock on the sessions file (blocks until it is free)."""
        fd = self._lock()
        try:
            yield
        finally:
            os.close(fd)

    def _lock(self) -> int:
        """Take the lock (a file beside the sessions file); closing the descriptor frees it."""
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(self.path.with_suffix(".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _write_session(self, creds: Credentials, *, make_default: bool) -> None:
        """Inside `locked()`: store `creds` as its server's session."""
        data = self.read()
        entry = {k: v for k, v in asdict(creds).items() if k != "server" and v is not None}
        data["servers"][creds.server] = {"access_token": entry.pop("token"), **entry}
        if make_default or not data.get("default"):
            data["default"] = creds.server
        self._replace(data)

    def _replace(self, data: dict[str, Any]) -> None:
        """Write the whole file anew, owner-only, and rename it into place."""
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".credentials-")  # mode 0600
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump(data, out, indent=1)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
