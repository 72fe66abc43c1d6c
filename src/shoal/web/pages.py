"""The dashboard: one HTML shell for every page, and its static files (`static/`: plain CSS and
JavaScript modules, nothing built). The shell holds no data; the script signs in and reads the
API and the client WebSocket like any other client."""

from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path

# The page loads only its own files and talks only to its own origin (REST and /ws). No
# inline script or style, no `style=` attribute: scripts set styles through the CSSOM
# (`el.style.width = …`), which the policy allows.
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; "
       "form-action 'self'")


@functools.cache
def app_html() -> str:
    """The shell every dashboard page is served as."""
    return resources.files("shoal.web").joinpath("app.html").read_text(encoding="utf-8")


def static_dir() -> Path:
    """Where the dashboard's CSS and JavaScript are."""
    return Path(str(resources.files("shoal.web").joinpath("static")))
