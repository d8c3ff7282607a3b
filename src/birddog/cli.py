"""The ``birddog`` command: run the daemon and the worker, send, inspect, replay, probe.

Every flag has an environment twin (``BIRDDOG_<COMMAND>_<FLAG>``, e.g.
``BIRDDOG_RUN_ONCE=1``); settings read ``BIRDDOG_*`` and ``DATABASE_URL``.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from collections.abc import Awaitable, Callable, Coroutine
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import click

from birddog.core.errors import BirdDogError
from birddog.logs import configure
from birddog.settings import Settings

T = TypeVar("T")

EXIT_OK = 0
EXIT_ALARM = 1
EXIT_USAGE = 2


def _settings(ctx: click.Context) -> Settings:
    settings: Settings = ctx.obj
    return settings


def _announce(text: str) -> None:
    click.echo(text, err=True)


def _run(coro: Coroutine[Any, Any, T]) -> T:
    try:
        return asyncio.run(coro)
    except BirdDogError as exc:
        raise click.ClickException(str(exc)) from exc


def _exit_before_started(signum: int, _frame: object) -> None:
    """SIGTERM while still starting up: nothing was claimed yet, so leave quietly (exit 0)."""
    raise SystemExit(0)


def _quiet_until_started() -> None:
    # Replaced by the daemon's and the worker's own handlers once their loop runs.
    signal.signal(signal.SIGTERM, _exit_before_started)


@click.group(
    context_settings={"auto_envvar_prefix": "BIRDDOG", "help_option_names": ["-h", "--help"]}
)
@click.version_option(package_name="birddog")
@click.option(
    "--database-url",
    envvar="DATABASE_URL",
    help="PostgreSQL DSN (env DATABASE_URL). Unset: an embedded server in the data directory.",
)
@click.option("--log-format", type=click.Choice(["auto", "json", "console"]), default=None)
@click.pass_context
def main(ctx: click.Context, database_url: str | None, log_format: str | None) -> None:
    """BirdDog: a durable, PostgreSQL-backed mail room for AI agents."""
    updates: dict[str, Any] = {}
    if database_url:
        updates["database_url"] = database_url
    if log_format:
        updates["log_format"] = log_format
    try:
        settings = Settings().model_copy(update=updates)
    except ValueError as exc:
        raise click.UsageError(f"invalid settings: {exc}") from exc
    configure(log_format=settings.log_format, level=settings.log_level)
    ctx.obj = settings


@main.command()
@click.pass_context
def migrate(ctx: click.Context) -> None:
    """Create or upgrade the birddog schema."""
    from birddog.bootstrap import database  # noqa: PLC0415 - keeps --help fast
    from birddog.postgres import migrate as upgrade  # noqa: PLC0415

    async def go() -> None:
        dsn, _server = await database(_settings(ctx), announce=_announce)
        await upgrade(dsn)

    _run(go())
    click.echo("schema is at head")


@main.command()
@click.option("--once", is_flag=True, help="Drain until nothing is due, then exit.")
@click.option("--migrate/--no-migrate", "migrate_first", default=False, help="Upgrade first.")
@click.pass_context
def run(ctx: click.Context, once: bool, migrate_first: bool) -> None:
    """Run the drain daemon: deliver owed replies until stopped (SIGTERM/SIGINT)."""
    _quiet_until_started()
    from birddog.app import run_daemon  # noqa: PLC0415

    _run(run_daemon(_settings(ctx), once=once, migrate_first=migrate_first, announce=_announce))


@main.command()
@click.option("--handler", required=True, help="package.module:function, an async handler.")
@click.option("--queue", "queues", multiple=True, help="Only these queues (session ids).")
@click.option("--concurrency", type=int, default=None, help="Jobs run at once.")
@click.option("--once", is_flag=True, help="Run queued jobs, then exit.")
@click.pass_context
def worker(
    ctx: click.Context, handler: str, queues: tuple[str, ...], concurrency: int | None, once: bool
) -> None:
    """Run agent jobs with HANDLER, settling and fanning out each one."""
    _quiet_until_started()
    from birddog.app import run_worker  # noqa: PLC0415
    from birddog.worker import load_handler  # noqa: PLC0415

    settings = _settings(ctx)
    if concurrency is not None:
        settings = settings.model_copy(update={"worker_concurrency": concurrency})
    sys.path.insert(0, ".")
    try:
        function = load_handler(handler)
    except BirdDogError as exc:
        raise click.UsageError(str(exc)) from exc
    _run(run_worker(settings, function, queues=list(queues), once=once, announce=_announce))


def _address(value: str, field: str) -> dict[str, str]:
    agent, sep, session = value.partition(":")
    if not sep:
        raise click.BadParameter(f"{field} must be AGENT_ID:SESSION_ID, got {value!r}")
    return {"kind": "agent", "agentId": agent, "sessionId": session}


@main.command()
@click.option("--job-id", required=True, help="The job id (a replay with the same id must match).")
@click.option("--to", "to", required=True, help="Target AGENT_ID:SESSION_ID.")
@click.option("--from", "from_", required=True, help="Sender AGENT_ID:SESSION_ID.")
@click.option("--reply-to", "reply_to", multiple=True, help="AGENT_ID:SESSION_ID, repeatable.")
@click.option("--key", required=True, help="The mail key (stable across retries).")
@click.option("--command-id", required=True, help="The command fact id.")
@click.option("--content", default=None, help="The mail content; '-' or unset reads stdin.")
@click.option("--max-recoveries", type=int, default=None, help="Recovery budget of the job.")
@click.pass_context
def send(
    ctx: click.Context,
    job_id: str,
    to: str,
    from_: str,
    reply_to: tuple[str, ...],
    key: str,
    command_id: str,
    content: str | None,
    max_recoveries: int | None,
) -> None:
    """Enqueue an agent job with mail, as a sender's transaction would."""
    from birddog.core.errors import InvalidInput  # noqa: PLC0415
    from birddog.core.jobs import AgentWork, agent_job, check_content_size  # noqa: PLC0415
    from birddog.core.mail import Mail  # noqa: PLC0415

    settings = _settings(ctx)
    # Bytes decoded here, not by the locale's codec: invalid UTF-8 becomes lone surrogates,
    # which Mail refuses naming ``content``, instead of a UnicodeDecodeError traceback.
    text = (
        sys.stdin.buffer.read().decode("utf-8", "surrogateescape")
        if content in (None, "-")
        else content
    )
    target = _address(to, "--to")
    work_fields: dict[str, Any] = {
        "jobId": job_id,
        "sessionId": target["sessionId"],
        "commandFactId": command_id,
    }
    if max_recoveries is not None:
        work_fields["recovery"] = {"maxRecoveries": max_recoveries}
    try:
        mail = Mail.model_validate(
            {
                "key": key,
                "to": target,
                "from": _address(from_, "--from"),
                "replyTo": [_address(value, "--reply-to") for value in reply_to],
                "content": text,
                "createdAt": int(datetime.now(UTC).timestamp() * 1000),
            }
        )
        check_content_size(mail.content, limit_bytes=settings.max_content_bytes)
        job = agent_job(
            AgentWork.model_validate(work_fields),
            mail,
            max_content_bytes=settings.max_content_bytes,
        )
    except InvalidInput as exc:
        raise click.UsageError(str(exc)) from exc

    async def go() -> bool:
        from birddog.bootstrap import database  # noqa: PLC0415
        from birddog.postgres.jobs import enqueue_accepted_job  # noqa: PLC0415
        from birddog.postgres.pool import create_pool  # noqa: PLC0415

        dsn, _server = await database(settings, announce=_announce)
        pool = await create_pool(dsn, max_size=1)
        try:
            async with pool.acquire() as conn, conn.transaction():
                return await enqueue_accepted_job(conn, job)
        finally:
            await pool.close()

    inserted = _run(go())
    click.echo(f"{'enqueued' if inserted else 'already enqueued (identical replay)'}: {job_id}")


@main.group()
def route() -> None:
    """Manage routes: where each agent's replies are posted."""


def _with_stack(ctx: click.Context, action: Callable[[Any], Awaitable[T]]) -> T:
    from birddog.bootstrap import open_stack  # noqa: PLC0415

    async def go() -> T:
        async with open_stack(_settings(ctx), announce=_announce, pool_size=2) as stack:
            return await action(stack)

    return _run(go())


@route.command("add")
@click.argument("agent_id")
@click.argument("url")
@click.option("--secret", default=None, help="whsec_... signing secret; generated when unset.")
@click.option("--held", is_flag=True, help="Add it held (replies wait until released).")
@click.pass_context
def route_add(ctx: click.Context, agent_id: str, url: str, secret: str | None, held: bool) -> None:
    """Route AGENT_ID's replies to URL; prints the signing secret once."""
    added = _with_stack(ctx, lambda s: s.routes.add(agent_id, url, secret=secret, enabled=not held))
    click.echo(f"route {added.agent_id} -> {added.url} ({'held' if held else 'enabled'})")
    click.echo(f"signing secret: {added.secret}")


@route.command("update")
@click.argument("agent_id")
@click.option("--url", default=None)
@click.option("--secret", default=None)
@click.pass_context
def route_update(ctx: click.Context, agent_id: str, url: str | None, secret: str | None) -> None:
    """Change AGENT_ID's inbox URL or signing secret."""
    updated = _with_stack(ctx, lambda s: s.routes.update(agent_id, url=url, secret=secret))
    click.echo(f"route {updated.agent_id} -> {updated.url}")


@route.command("list")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def route_list(ctx: click.Context, as_json: bool) -> None:
    """List routes (secrets are never shown)."""
    routes = _with_stack(ctx, lambda s: s.routes.list())
    rows = [{"agentId": r.agent_id, "url": r.url, "enabled": r.enabled} for r in routes]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    for row in rows:
        click.echo(f"{row['agentId']}\t{'enabled' if row['enabled'] else 'HELD'}\t{row['url']}")


@route.command("hold")
@click.argument("agent_id")
@click.pass_context
def route_hold(ctx: click.Context, agent_id: str) -> None:
    """Hold AGENT_ID: its replies stay, untouched, until released."""
    _with_stack(ctx, lambda s: s.routes.hold(agent_id))
    click.echo(f"held {agent_id}")


@route.command("release")
@click.argument("agent_id")
@click.pass_context
def route_release(ctx: click.Context, agent_id: str) -> None:
    """Release AGENT_ID: its waiting replies are delivered."""
    _with_stack(ctx, lambda s: s.routes.release(agent_id))
    click.echo(f"released {agent_id}")


@route.command("remove")
@click.argument("agent_id")
@click.pass_context
def route_remove(ctx: click.Context, agent_id: str) -> None:
    """Remove AGENT_ID's route (its future replies die as unknown recipients)."""
    _with_stack(ctx, lambda s: s.routes.remove(agent_id))
    click.echo(f"removed {agent_id}")


@main.command()
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def status(ctx: click.Context, as_json: bool) -> None:
    """Counts by state, the oldest pending reply, the next wake, and daemons seen."""
    from birddog.app import status_report  # noqa: PLC0415

    report = _with_stack(ctx, status_report)
    if as_json:
        click.echo(json.dumps(report, indent=2, default=str))
        return
    for name, value in report.items():
        click.echo(f"{name:>22}: {value}")


def _print_rows(rows: list[dict[str, Any]], as_json: bool, columns: list[str]) -> None:
    if as_json:
        click.echo(json.dumps(rows, indent=2, default=str))
        return
    if not rows:
        click.echo("(none)")
        return
    click.echo("\t".join(columns))
    for row in rows:
        click.echo("\t".join("" if row.get(c) is None else str(row.get(c)) for c in columns))


@main.command()
@click.option("--limit", type=int, default=50)
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def pending(ctx: click.Context, limit: int, as_json: bool) -> None:
    """Replies still owed: to whom, since when, attempts, last error, next try."""
    rows = _with_stack(ctx, lambda s: s.outbox.list_pending(limit=limit))
    _print_rows(
        rows,
        as_json,
        ["key", "recipient_agent_id", "held", "attempts", "deferrals", "next_try_at", "last_error"],
    )


@main.command()
@click.option("--limit", type=int, default=50)
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def dead(ctx: click.Context, limit: int, as_json: bool) -> None:
    """Dead letters: why each died and its last error."""
    rows = _with_stack(ctx, lambda s: s.outbox.list_dead(limit=limit))
    _print_rows(
        rows,
        as_json,
        ["key", "recipient_agent_id", "dead_reason", "attempts", "dead_at", "last_error"],
    )


@main.command()
@click.argument("key", required=False)
@click.option("--agent", "agent_id", default=None, help="Every dead letter of this recipient.")
@click.pass_context
def replay(ctx: click.Context, key: str | None, agent_id: str | None) -> None:
    """Put a dead letter (KEY) or all of a recipient's back to pending, attempts reset."""
    if (key is None) == (agent_id is None):
        raise click.UsageError("give exactly one of KEY or --agent")
    keys = _with_stack(ctx, lambda s: s.outbox.replay(key=key, agent_id=agent_id))
    click.echo(f"replayed {len(keys)} dead letter(s)")
    for replayed in keys:
        click.echo(replayed)


@main.command()
@click.option("--pending-s", type=float, default=None, help="Alarm when pending longer.")
@click.option("--dead-s", type=float, default=None, help="Alarm on a dead letter this new.")
@click.pass_context
def check(ctx: click.Context, pending_s: float | None, dead_s: float | None) -> None:
    """Exit 1 when a reply is pending too long or a dead letter is new (for alerting)."""
    from birddog.app import check_report  # noqa: PLC0415

    settings = _settings(ctx)
    problems = _with_stack(
        ctx,
        lambda s: check_report(
            s,
            pending_after=timedelta(seconds=pending_s or settings.check_pending_s),
            dead_within=timedelta(seconds=dead_s or settings.check_dead_s),
        ),
    )
    for problem in problems:
        click.echo(problem)
    if problems:
        sys.exit(EXIT_ALARM)
    click.echo("ok")


@main.command()
@click.option("--timeout-s", type=float, default=300.0, help="Deadline for the round trip.")
@click.option(
    "--drain", is_flag=True, help="Deliver the probe's reply itself instead of a running daemon."
)
@click.pass_context
def probe(ctx: click.Context, timeout_s: float, drain: bool) -> None:
    """A canary round trip, job to receipt, with a nonce; exit 0 only if it came back."""
    from birddog.app import run_probe  # noqa: PLC0415

    result = _with_stack(ctx, lambda s: run_probe(s, timeout_s=timeout_s, drain=drain))
    click.echo(result.message)
    sys.exit(EXIT_OK if result.ok else EXIT_ALARM)


@main.command()
@click.pass_context
def demo(ctx: click.Context) -> None:
    """Two sample agents, jobs with reply lists, a flaky inbox: watch replies travel."""
    from birddog.demo import run_demo  # noqa: PLC0415

    _run(run_demo(_settings(ctx), echo=click.echo))
