"""``birddog secrets ...``: the key that seals stored signing secrets, and re-sealing."""

from __future__ import annotations

import sys

import click

from birddog.cli import main, settings_of, with_services
from birddog.sealing import ALERT_CONTEXT, generate_key


@main.group()
def secrets() -> None:
    """Seal stored signing secrets with BIRDDOG_SECRET_KEY (AES-GCM), and rotate that key."""


@secrets.command("keygen")
def secrets_keygen() -> None:
    """Print a new random key for BIRDDOG_SECRET_KEY (keep it out of the database host)."""
    click.echo(generate_key())


@secrets.command("rekey")
@click.pass_context
def secrets_rekey(ctx: click.Context) -> None:
    """Store every route secret as the keys now say: sealed with BIRDDOG_SECRET_KEY, or plain.

    Secrets sealed with an older key open with BIRDDOG_SECRET_KEY_PREVIOUS; run this after
    changing keys, then drop the old key. Without BIRDDOG_SECRET_KEY it stores them plain.
    """
    box = settings_of(ctx).secret_box()
    report = with_services(ctx, lambda s: s.routes.reseal())
    form = f"sealed with key {box.key_id}" if box.key_id else "stored plain (no key set)"
    click.echo(f"{report.resealed} secret(s) of {report.routes} route(s) rewritten; all {form}")


@secrets.command("seal")
@click.pass_context
def secrets_seal(ctx: click.Context) -> None:
    """Read a secret on stdin and print it sealed, for BIRDDOG_ALERT_SECRET."""
    box = settings_of(ctx).secret_box()
    if box.key_id is None:
        raise click.UsageError("set BIRDDOG_SECRET_KEY first: there is no key to seal with")
    if sys.stdin.isatty():
        raise click.UsageError("pipe the secret in (it never goes on the command line)")
    secret = sys.stdin.readline().strip()
    if not secret:
        raise click.UsageError("no secret on stdin")
    click.echo(box.seal(secret, context=ALERT_CONTEXT))
