"""``birddog uri`` and ``birddog psql``: where the data is, and a SQL session on it."""

from __future__ import annotations

import subprocess
import sys

import click

from birddog.cli import ConfigurationError, main, settings_of
from birddog.core.errors import BirdDogError, InvalidSetting


@main.command()
@click.pass_context
def uri(ctx: click.Context) -> None:
    """Print the database URI in use (stdout) and where it points (stderr)."""
    from birddog.bootstrap import running_database  # noqa: PLC0415 - keeps --help fast

    try:
        dsn, where = running_database(settings_of(ctx))
    except InvalidSetting as exc:
        raise ConfigurationError(str(exc)) from exc
    except BirdDogError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(dsn)
    click.echo(where, err=True)


@main.command(context_settings={"ignore_unknown_options": True})
@click.argument("psql_args", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def psql(ctx: click.Context, psql_args: tuple[str, ...]) -> None:
    """Open psql on the database in use; PSQL_ARGS go to psql (e.g. -c 'SELECT 1')."""
    from birddog.bootstrap import psql_session  # noqa: PLC0415 - keeps --help fast

    try:
        argv, env = psql_session(settings_of(ctx), psql_args)
    except InvalidSetting as exc:
        raise ConfigurationError(str(exc)) from exc
    except BirdDogError as exc:
        raise click.ClickException(str(exc)) from exc
    sys.exit(subprocess.call(argv, env=env))  # noqa: S603 - psql, with the user's own arguments
