"""``birddog health``: is the daemon (or the worker) in this container alive? For HEALTHCHECK."""

from __future__ import annotations

import json
import socket
import sys
import urllib.error
import urllib.request

import click

from birddog.cli import EXIT_ALARM, main, settings_of, with_stack

HEALTH_TIMEOUT_S = 3.0
"""How long the daemon's /healthz may take to answer."""


@main.command()
@click.option(
    "--worker",
    is_flag=True,
    help="Check the worker on this host (its heartbeat in the database) instead of the daemon.",
)
@click.option(
    "--url",
    default=None,
    help="The daemon's /healthz URL; unset: BIRDDOG_METRICS_PORT on this host.",
)
@click.pass_context
def health(ctx: click.Context, worker: bool, url: str | None) -> None:
    """Exit 0 when the daemon (or --worker) on this host is healthy, else 1 with the reason."""
    healthy, why = _worker_health(ctx) if worker else _daemon_health(ctx, url)
    click.echo(why, err=not healthy)
    if not healthy:
        sys.exit(EXIT_ALARM)


def _daemon_health(ctx: click.Context, url: str | None) -> tuple[bool, str]:
    settings = settings_of(ctx)
    if url is None:
        if not settings.metrics_port:
            return False, "metrics are off (BIRDDOG_METRICS_PORT=0): no /healthz to ask"
        # The daemon listens on BIRDDOG_METRICS_HOST; 0.0.0.0 and loopback both answer here.
        url = f"http://127.0.0.1:{settings.metrics_port}/healthz"
    try:
        with urllib.request.urlopen(url, timeout=HEALTH_TIMEOUT_S) as answer:  # noqa: S310 - http(s) only, operator's
            ok = json.loads(answer.read()).get("ok") is True
    except urllib.error.HTTPError as exc:
        return False, f"daemon unhealthy: {url} answered {exc.code} (database away?)"
    except (OSError, ValueError) as exc:
        return False, f"no daemon answers at {url}: {getattr(exc, 'reason', exc)}"
    return (True, "daemon healthy") if ok else (False, f"daemon unhealthy: {url} says not ok")


def _worker_health(ctx: click.Context) -> tuple[bool, str]:
    from birddog.bootstrap import HEARTBEAT_S  # noqa: PLC0415 - keeps --help fast
    from birddog.cli.ops import DAEMONS_SEEN_BEATS  # noqa: PLC0415

    host = socket.gethostname()
    within = DAEMONS_SEEN_BEATS * HEARTBEAT_S
    seen = with_stack(ctx, lambda stack: stack.reports.daemons_seen(within_s=within))
    mine = [row for row in seen if row["kind"] == "worker" and row["host"] == host]
    if mine:
        return True, f"worker healthy: {len(mine)} on {host} beat within {within:g} s"
    return False, f"no worker on {host} beat within {within:g} s"
