"""``birddog health``: is the daemon (or the worker) in this container alive? For HEALTHCHECK."""

from __future__ import annotations

import json
import socket
import sys
import urllib.error
import urllib.request

import click

from birddog.cli import EXIT_ALARM, main, settings_of, with_services

HEALTH_TIMEOUT_S = 3.0
"""How long the daemon's /healthz may take to answer."""


@main.command()
@click.option(
    "--worker",
    is_flag=True,
    help="Check the worker on this host instead of the daemon: its /healthz on "
    "BIRDDOG_WORKER_METRICS_PORT, or with that port 0 its heartbeat in the database.",
)
@click.option(
    "--url",
    default=None,
    help="The /healthz URL to ask; unset: BIRDDOG_METRICS_PORT (or "
    "BIRDDOG_WORKER_METRICS_PORT) on this host.",
)
@click.pass_context
def health(ctx: click.Context, worker: bool, url: str | None) -> None:
    """Exit 0 when the daemon (or --worker) on this host is healthy, else 1 with the reason."""
    settings = settings_of(ctx)
    if worker and url is None and not settings.worker_metrics_port:
        healthy, why = _worker_heartbeat(ctx)
    elif worker:
        healthy, why = _healthz("worker", url, settings.worker_metrics_port)
    else:
        healthy, why = _healthz("daemon", url, settings.metrics_port)
    click.echo(why, err=not healthy)
    if not healthy:
        sys.exit(EXIT_ALARM)


def _healthz(who: str, url: str | None, port: int) -> tuple[bool, str]:
    """Ask a daemon's or worker's ``/healthz`` (``url``, or ``port`` on this host)."""
    if url is None:
        if not port:
            return False, "metrics are off (BIRDDOG_METRICS_PORT=0): no /healthz to ask"
        # It listens on its metrics host; 0.0.0.0 and loopback both answer here.
        url = f"http://127.0.0.1:{port}/healthz"
    try:
        with urllib.request.urlopen(url, timeout=HEALTH_TIMEOUT_S) as answer:  # noqa: S310 - http(s) only, operator's
            ok = json.loads(answer.read()).get("ok") is True
    except urllib.error.HTTPError as exc:
        return False, f"{who} unhealthy: {url} answered {exc.code} (database away?)"
    except (OSError, ValueError) as exc:
        return False, f"no {who} answers at {url}: {getattr(exc, 'reason', exc)}"
    return (True, f"{who} healthy") if ok else (False, f"{who} unhealthy: {url} says not ok")


def _worker_heartbeat(ctx: click.Context) -> tuple[bool, str]:
    from birddog.bootstrap import HEARTBEAT_S  # noqa: PLC0415 - keeps --help fast
    from birddog.cli.ops import DAEMONS_SEEN_BEATS  # noqa: PLC0415

    host = socket.gethostname()
    within = DAEMONS_SEEN_BEATS * HEARTBEAT_S
    seen = with_services(ctx, lambda adapters: adapters.reports.daemons_seen(within_s=within))
    mine = [row for row in seen if row["kind"] == "worker" and row["host"] == host]
    if mine:
        return True, f"worker healthy: {len(mine)} on {host} beat within {within:g} s"
    return False, f"no worker on {host} beat within {within:g} s"
