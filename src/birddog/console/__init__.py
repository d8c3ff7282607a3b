"""The operator's console: a web page on 127.0.0.1 over the mail room's tables.

Server-rendered (aiohttp and Jinja2 templates), with nothing loaded from elsewhere: the
templates and the stylesheet ship in this package, and the page runs no script. See
:func:`birddog.console.app.make_app`; ``birddog console`` serves it.
"""

from __future__ import annotations

from birddog.console.app import SECURITY_HEADERS, make_app
from birddog.console.auth import Sessions

__all__ = ["SECURITY_HEADERS", "Sessions", "make_app"]
