"""The console's web application: pages rendered on the server, actions as plain form posts.

Pages: Overview, Pending, Dead letters, Routes, Jobs and Story. Actions (replay one dead
letter or all of an agent's, hold and release a route, cancel a job) are ``POST`` forms
that answer with a redirect back to the page (post/redirect/get). A read-only console
registers no action at all.

Every response carries the security headers (:data:`SECURITY_HEADERS`): a content
security policy that allows no script, no frame and no outside resource, no referrer,
no caching. Every value is HTML-escaped by Jinja2's autoescape and made
:func:`~birddog.core.text.printable` first (control and bidi characters shown as escapes),
by the environment's ``finalize``, so no template can forget.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlencode

import jinja2
import structlog
from aiohttp import web
from markupsafe import Markup

from birddog.console.auth import Sessions, host_is_loopback, safe_next, same_origin
from birddog.console.chart import activity_chart
from birddog.core.digests import digest_time_text
from birddog.core.duration import format_age
from birddog.core.errors import (
    BirdDogError,
    InvalidInput,
    JobNotFound,
    RouteNotFound,
    StoreUnavailable,
)
from birddog.core.mail import Outcome
from birddog.core.text import printable
from birddog.display import format_value
from birddog.ports import (
    JOB_STATES,
    PENDING_STATUSES,
    PREVIEW_CHARS,
    Admin,
    Clock,
    DeadLetterReplay,
    JobCancels,
    RouteEdits,
)

log = structlog.get_logger("birddog.console")

HERE = Path(__file__).parent
STATIC_DIR = HERE / "static"

SECURITY_HEADERS: Final = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
    "Cache-Control": "no-store",
}
"""Sent with every response, errors and static files included."""

PAGE_SIZE: Final = 50
"""Rows per page of a listing."""

MAX_FORM_BYTES: Final = 16 * 1024
"""The largest request body the console reads (forms hold a key and a token)."""

_ERRORS: Final[tuple[tuple[type[BirdDogError], int], ...]] = (
    (InvalidInput, 400),
    (JobNotFound, 404),
    (RouteNotFound, 404),
    (StoreUnavailable, 503),
)


@dataclass
class Console:
    """What the pages read and act on.

    Attributes:
        admin: the operator's reads.
        outbox: replays dead letters.
        routes: holds and releases recipients.
        jobs: cancels jobs.
        clock: the current time (ages, the activity chart).
        sessions: the start-up token, sessions and CSRF tokens.
        read_only: serve pages only, no actions.
        templates: the Jinja2 environment.
    """

    admin: Admin
    outbox: DeadLetterReplay
    routes: RouteEdits
    jobs: JobCancels
    clock: Clock
    sessions: Sessions
    read_only: bool
    templates: jinja2.Environment


CONSOLE = web.AppKey("console", Console)
SESSION = web.RequestKey("session", str)


VALUE_MAX_CHARS = PREVIEW_CHARS
"""The most characters of one value a page shows (a row written by hand may hold MBs)."""


def _finalize(value: object) -> object:
    # Runs on every {{ expression }} before autoescape: outside text is made printable and
    # bounded here, once, for every template.
    if isinstance(value, Markup):
        return value
    if isinstance(value, str):
        if len(value) > VALUE_MAX_CHARS:
            return printable(value[:VALUE_MAX_CHARS]) + f"… ({len(value):,} characters)"
        return printable(value)
    if value is None or isinstance(value, datetime | timedelta | dict | list):
        return format_value(value)
    return value


def _since(value: datetime | None, now: datetime) -> str:
    if value is None:
        return "-"
    seconds = (now - value).total_seconds()
    return f"{format_age(seconds)} ago" if seconds >= 0 else f"in {format_age(-seconds)}"


def _when(value: object) -> object:
    # Attempt logs are JSON: their times arrive as ISO 8601 text.
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value)
        except ValueError:
            return value
    return value


def make_templates() -> jinja2.Environment:
    """The Jinja2 environment of the console's templates (autoescape on, values printable)."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("birddog.console", "templates"),
        autoescape=True,
        finalize=_finalize,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["since"] = _since
    env.filters["when"] = _when
    env.filters["digest_time"] = digest_time_text
    env.filters["age"] = lambda seconds: format_age(seconds) if seconds is not None else "-"
    env.globals["query"] = lambda **params: urlencode(
        {k: v for k, v in params.items() if v not in (None, "")}
    )
    return env


def make_app(
    *,
    admin: Admin,
    outbox: DeadLetterReplay,
    routes: RouteEdits,
    jobs: JobCancels,
    clock: Clock,
    sessions: Sessions | None = None,
    read_only: bool = False,
) -> web.Application:
    """Build the console application.

    Args:
        admin: the operator's reads.
        outbox: replays dead letters.
        routes: adds, changes, holds and releases routes.
        jobs: cancels jobs.
        clock: the current time.
        sessions: the start-up token and sessions (a fresh token when not given).
        read_only: serve no action at all.

    Returns:
        The application; serve it on 127.0.0.1 only.
    """
    app = web.Application(
        middlewares=[_security_headers, _errors, _guard], client_max_size=MAX_FORM_BYTES
    )
    app[CONSOLE] = Console(
        admin=admin,
        outbox=outbox,
        routes=routes,
        jobs=jobs,
        clock=clock,
        sessions=sessions or Sessions(),
        read_only=read_only,
        templates=make_templates(),
    )
    app.router.add_get("/", overview)
    app.router.add_get("/pending", pending)
    app.router.add_get("/dead", dead)
    app.router.add_get("/routes", routes_page)
    app.router.add_get("/jobs", jobs_page)
    app.router.add_get("/story", story)
    app.router.add_get("/login", login_page)
    app.router.add_post("/login", login)
    app.router.add_static("/static/", STATIC_DIR, append_version=False)
    if not read_only:
        app.router.add_post("/dead/replay", replay)
        app.router.add_post("/routes/save", save_route)
        app.router.add_post("/routes/hold", hold)
        app.router.add_post("/routes/release", release)
        app.router.add_post("/jobs/cancel", cancel)
    return app


# ---- middlewares ---------------------------------------------------------------------

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def _security_headers(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        response = await handler(request)
    except web.HTTPException as exc:
        exc.headers.update(SECURITY_HEADERS)
        raise
    response.headers.update(SECURITY_HEADERS)
    return response


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except web.HTTPException:
        raise
    except BirdDogError as exc:
        status = next((code for kind, code in _ERRORS if isinstance(exc, kind)), 500)
        return _render(request, "error.html", http_status=status, title="Error", message=str(exc))
    except Exception as exc:
        log.exception("console_error", path=request.path, error=type(exc).__name__)
        return _render(
            request, "error.html", http_status=500, title="Error", message="internal error"
        )


def _cookie_name(request: web.Request) -> str:
    # Cookies are not kept apart by port: two consoles on one host need two names.
    return f"birddog_console_{request.url.port or 80}"


@web.middleware
async def _guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    if not host_is_loopback(request.headers.get("Host")):
        raise web.HTTPMisdirectedRequest(text="the console answers on 127.0.0.1 only")
    if request.path.startswith("/static/"):
        return await handler(request)
    console = request.app[CONSOLE]
    session = request.cookies.get(_cookie_name(request))
    if "token" in request.query:
        rest = {k: v for k, v in request.query.items() if k != "token"}
        return _sign_in(request, request.query.get("token"), str(request.rel_url.with_query(rest)))
    if session is None or not console.sessions.is_live(session):
        if request.path == "/login":
            return await handler(request)
        if request.method == "GET":
            return _render(
                request, "login.html", http_status=401, title="Sign in", next=request.path_qs
            )
        raise web.HTTPForbidden(text="sign in with the console's token first")
    if request.method == "POST":
        form = await request.post()
        csrf = form.get("csrf")
        if not console.sessions.csrf_ok(session, csrf if isinstance(csrf, str) else None):
            raise web.HTTPForbidden(text="missing or wrong CSRF token")
        if not same_origin(request.headers, request.host):
            raise web.HTTPForbidden(text="cross-site request refused")
    request[SESSION] = session
    return await handler(request)


def _sign_in(request: web.Request, token: str | None, next_path: str) -> web.Response:
    session = request.app[CONSOLE].sessions.sign_in(token)
    if session is None:
        log.warning("console_sign_in_refused")
        return _render(
            request, "login.html", http_status=403, title="Sign in", next=next_path, wrong=True
        )
    redirect = web.HTTPSeeOther(safe_next(next_path))
    redirect.set_cookie(_cookie_name(request), session, httponly=True, samesite="Strict", path="/")
    raise redirect


# ---- rendering -----------------------------------------------------------------------


def _render(
    request: web.Request, template: str, *, http_status: int = 200, **context: Any
) -> web.Response:
    console = request.app[CONSOLE]
    session = request.get(SESSION)
    common = {
        "now": console.clock.now(),
        "read_only": console.read_only,
        "csrf": console.sessions.csrf(session) if session else "",
        "flash": console.sessions.take_flash(session) if session else None,
        "path": request.path,
        "here": request.path_qs,
    }
    html = console.templates.get_template(template).render(common | context)
    return web.Response(text=html, status=http_status, content_type="text/html", charset="utf-8")


def _param(request: web.Request, name: str) -> str | None:
    value = request.query.get(name, "").strip()
    return value or None


# ---- pages ---------------------------------------------------------------------------


async def overview(request: web.Request) -> web.Response:
    """Counts by state, the last hour's deliveries and dead letters, live processes."""
    console = request.app[CONSOLE]
    data = await console.admin.overview(now=console.clock.now())
    return _render(
        request,
        "overview.html",
        title="Overview",
        outbox=data.outbox,
        jobs=data.jobs,
        chart=activity_chart(data.activity),
        daemons=data.daemons,
    )


async def pending(request: web.Request) -> web.Response:
    """Pending replies, next due first, by recipient and status."""
    recipient, status = _param(request, "recipient"), _param(request, "status")
    page = await request.app[CONSOLE].admin.pending(
        recipient=recipient, status=status, after=_param(request, "after"), limit=PAGE_SIZE
    )
    return _render(
        request,
        "pending.html",
        title="Pending",
        page=page,
        recipient=recipient,
        status=status,
        statuses=PENDING_STATUSES,
    )


async def dead(request: web.Request) -> web.Response:
    """Dead letters, newest first, with replay buttons."""
    recipient = _param(request, "recipient")
    page = await request.app[CONSOLE].admin.dead(
        recipient=recipient, after=_param(request, "after"), limit=PAGE_SIZE
    )
    return _render(request, "dead.html", title="Dead letters", page=page, recipient=recipient)


async def routes_page(request: web.Request) -> web.Response:
    """Routes, URLs redacted, with hold and release buttons; never a secret."""
    page = await request.app[CONSOLE].admin.routes(after=_param(request, "after"), limit=PAGE_SIZE)
    return _render(request, "routes.html", title="Routes", page=page)


async def jobs_page(request: web.Request) -> web.Response:
    """Jobs by state and queue, with cancel buttons for queued and running ones."""
    state, queue = _param(request, "state"), _param(request, "queue")
    page = await request.app[CONSOLE].admin.jobs(
        state=state, queue=queue, after=_param(request, "after"), limit=PAGE_SIZE
    )
    return _render(
        request, "jobs.html", title="Jobs", page=page, state=state, queue=queue, states=JOB_STATES
    )


async def story(request: web.Request) -> web.Response:
    """One mail's story by mail key, reply key or job id."""
    key = _param(request, "key")
    found = await request.app[CONSOLE].admin.story(key) if key else None
    return _render(request, "story.html", title="Story", key=key, story=found)


async def login_page(request: web.Request) -> web.StreamResponse:
    """The sign-in form (for a browser opened without the token in its URL)."""
    if request.get(SESSION):
        raise web.HTTPSeeOther(safe_next(request.query.get("next")))
    return _render(
        request, "login.html", title="Sign in", next=safe_next(request.query.get("next"))
    )


async def login(request: web.Request) -> web.StreamResponse:
    """Sign in with the token printed at start."""
    if not same_origin(request.headers, request.host):
        raise web.HTTPForbidden(text="cross-site request refused")
    form = await request.post()
    token, next_path = form.get("token"), form.get("next")
    return _sign_in(
        request,
        token if isinstance(token, str) else None,
        next_path if isinstance(next_path, str) else "/",
    )


# ---- actions -------------------------------------------------------------------------


async def _form(request: web.Request) -> Mapping[str, str]:
    form = await request.post()
    return {k: v for k, v in form.items() if isinstance(v, str)}


def _done(request: web.Request, form: Mapping[str, str], message: str) -> web.HTTPSeeOther:
    request.app[CONSOLE].sessions.flash(request[SESSION], message)
    return web.HTTPSeeOther(safe_next(form.get("back")))


def _required(form: Mapping[str, str], name: str) -> str:
    value = form.get(name, "")
    if not value:
        raise InvalidInput(f"{name} is required", field=name)
    return value


async def replay(request: web.Request) -> web.StreamResponse:
    """Put one dead letter (``key``) or all of an agent's (``agent``) back to pending."""
    form = await _form(request)
    key, agent = form.get("key") or None, form.get("agent") or None
    if (key is None) == (agent is None):
        raise InvalidInput("give exactly one of key or agent", field="key")
    keys = await request.app[CONSOLE].outbox.replay(key=key, agent_id=agent)
    log.info("console_replay", replayed=len(keys), by_agent=agent is not None)
    what = f"all dead letters of {agent}" if agent else key
    raise _done(request, form, f"replayed {len(keys)} ({what})")


def _batch(form: Mapping[str, str]) -> int | None:
    value = form.get("batch", "").strip()
    if not value:
        return None
    try:
        return int(value)
    except ValueError:
        raise InvalidInput("batch must be a whole number from 1 to 1000", field="batch") from None


async def save_route(request: web.Request) -> web.StreamResponse:
    """Add a route (an inbox URL, its secret shown once, or a mailbox), or change one.

    An agent without a route gets one; an agent with one gets its URL and/or batch size
    changed (a route's kind stays: remove it with ``birddog route remove`` to change it).
    """
    form = await _form(request)
    agent = _required(form, "agent")
    url, batch = form.get("url", "").strip() or None, _batch(form)
    mailbox = form.get("kind") == "mailbox"
    routes = request.app[CONSOLE].routes
    current = await routes.route(agent)
    if mailbox and (url is not None or batch not in (None, 1)):
        raise InvalidInput("a mailbox route takes no URL and no batch size", field="url")
    if current is None:
        if mailbox:
            await routes.add(agent, kind="mailbox")
            log.info("console_route_added", kind="mailbox")
            raise _done(request, form, f"added {agent}: its replies go to its mailbox")
        if url is None:
            raise InvalidInput("give the inbox URL, or choose mailbox", field="url")
        added = await routes.add(agent, url, batch_size=1 if batch is None else batch)
        log.info("console_route_added", kind="http")
        # The secret is shown on this page only: not stored in the session, not cached.
        response = _render(request, "route_added.html", title="Route added", route=added)
        response.headers["Cache-Control"] = "no-store"
        return response
    if mailbox != (current.kind == "mailbox"):
        raise InvalidInput(
            f"{agent} has a {current.kind} route: its kind stays; remove it first "
            f"(birddog route remove {agent}) to add the other kind",
            field="kind",
        )
    if url is None and batch is None:
        raise InvalidInput("nothing to change: give a new URL or batch size", field="url")
    await routes.update(agent, url=url, batch_size=batch)
    log.info("console_route_updated", url=url is not None, batch=batch is not None)
    raise _done(request, form, f"updated {agent}")


async def hold(request: web.Request) -> web.StreamResponse:
    """Hold a recipient: its replies wait, untouched and unaged."""
    form = await _form(request)
    agent = _required(form, "agent")
    await request.app[CONSOLE].routes.hold(agent)
    log.info("console_hold")
    raise _done(request, form, f"held {agent}")


async def release(request: web.Request) -> web.StreamResponse:
    """Release a held recipient: its waiting replies go out now."""
    form = await _form(request)
    agent = _required(form, "agent")
    await request.app[CONSOLE].routes.release(agent)
    log.info("console_release")
    raise _done(request, form, f"released {agent}")


async def cancel(request: web.Request) -> web.StreamResponse:
    """Cancel a queued job now, or a running one when its worker next beats."""
    form = await _form(request)
    job_id = _required(form, "job_id")
    outcome = await request.app[CONSOLE].jobs.cancel(job_id=job_id, content=form.get("reason", ""))
    log.info("console_cancel", settled=outcome is not None)
    if outcome is None:
        message = f"cancellation of {job_id} recorded; it settles when its worker stops it"
    elif outcome == Outcome.CANCELLED:
        message = f"{job_id} settled cancelled"
    else:
        message = f"{job_id} had already settled {outcome}; nothing to cancel"
    raise _done(request, form, message)
