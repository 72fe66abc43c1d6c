"""Security headers on every HTTP answer, added where the route did not set its own.

Every answer: `X-Content-Type-Options: nosniff` (a browser never guesses a type, say a JSON
error as HTML), `Referrer-Policy: no-referrer` (a share link's token never leaves in a
`Referer`), `X-Frame-Options: DENY` (no page of Shoal is framed by another site; the
dashboard's policy also says `frame-ancestors 'none'`), and, when the deployment says it is
served over HTTPS (`hsts_max_age` > 0), `Strict-Transport-Security`. API answers, and any
answer to a request that carried credentials, are `Cache-Control: no-store`: tokens and
private data stay out of browser and proxy caches (a route that chose its own caching, such
as an event stream's `no-cache`, keeps it). Pages set their own `Content-Security-Policy`
(the dashboard's: `shoal.web.pages.CSP`). CORS (`cors_origins`) is Starlette's, inside this
middleware; `Access-Control-Allow-Credentials` goes only with an allowed origin.
"""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

ALWAYS = {
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}


class SecurityHeaders:
    """ASGI middleware adding the headers above to each HTTP response."""

    def __init__(self, app: ASGIApp, *, hsts_max_age: int = 0) -> None:
        self.app = app
        self.always = dict(ALWAYS)
        if hsts_max_age > 0:
            self.always["Strict-Transport-Security"] = f"max-age={hsts_max_age}"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on and dress its response's headers."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        private = scope["path"].startswith("/api/") or any(
            name in (b"authorization", b"cookie") for name, _ in scope["headers"])

        async def dressed(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in self.always.items():
                    headers.setdefault(name, value)
                if private:
                    headers.setdefault("Cache-Control", "no-store")
                if "access-control-allow-origin" not in headers:
                    # Starlette's CORS says it to every origin; without an allowed origin it
                    # allows nothing, and it is said only to the origins listed.
                    del headers["access-control-allow-credentials"]
            await send(message)

        await self.app(scope, receive, dressed)
