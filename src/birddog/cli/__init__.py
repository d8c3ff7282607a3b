"""The ``birddog`` command: run the daemon and the worker, send, inspect, replay, probe.

Every flag has an environment twin (``BIRDDOG_<COMMAND>_<FLAG>``, e.g.
``BIRDDOG_RUN_ONCE=1``); settings read ``BIRDDOG_*`` and ``DATABASE_URL``.

This module holds the ``main`` group and what every command shares; each group of
commands lives in a module of its own, registered by the import at the end of this file.
Commands are handed a :class:`~birddog.service.entry.Services` (:func:`with_services`),
typed by ports; the composition root (:mod:`birddog.bootstrap`) builds it, imported inside
the command so that ``--help`` stays fast.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

import click
import structlog
from pydantic import ValidationError

from birddog.core.duration import parse_duration
from birddog.core.errors import BirdDogError, DatabaseRefused, InvalidInput, InvalidSetting
from birddog.core.model import ID_MAX_LENGTH, check_name
from birddog.core.text import shown_key
from birddog.display import dump_json, render_table
from birddog.logs import configure, renders_json
from birddog.runtime import event_loop_factory
from birddog.settings import Settings, variable_of

if TYPE_CHECKING:
    from birddog.service.entry import Services

T = TypeVar("T")

EXIT_OK = 0
EXIT_ALARM = 1
EXIT_CONFIG = 2
"""Exit code for what only a change of configuration fixes (and for bad usage)."""


class ConfigurationError(click.ClickException):
    """A one-line error that exits 2: retrying the same command cannot help."""

    exit_code = EXIT_CONFIG


def duration(value: str | float) -> float:
    """A command-line duration: ``30d``, ``12h``, ``90m``, ``45s`` or seconds; positive, finite.

    Used as an option's ``type``: ``nan``, ``inf``, ``1e400``, zero and negatives are
    refused with one line naming the option, before anything runs.

    Raises:
        ValueError: not such a duration (click reports it as the option's bad value).
    """
    if isinstance(value, float):
        return value
    try:
        seconds = parse_duration(str(value), field="it")
    except InvalidInput as exc:
        raise ValueError(str(exc)) from None
    if seconds <= 0:
        raise ValueError("it must be longer than 0 s")
    return seconds


def wait_duration(value: str | float) -> float:
    """How long to wait: a :func:`duration`, or ``0`` (do not wait at all).

    Raises:
        ValueError: not such a duration (``nan``, ``inf`` and negatives included).
    """
    if isinstance(value, float):
        return value
    try:
        return parse_duration(str(value), field="it")
    except InvalidInput as exc:
        raise ValueError(str(exc)) from None


class BirdDogGroup(click.Group):
    """The ``birddog`` group: arguments that are not UTF-8 text are refused up front.

    The shell hands Python bytes it cannot decode as lone surrogates, which no database
    or terminal takes; one line says which argument it was instead of a traceback later.
    """

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        """Parse the top-level options; a usage error becomes one line."""
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.UsageError as exc:
            raise _one_line(exc) from None

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command; a usage error anywhere below becomes one line."""
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            raise _one_line(exc) from None

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """Check every argument, then parse as click does."""
        for position, arg in enumerate(args, start=1):
            try:
                arg.encode("utf-8")
            except UnicodeEncodeError:
                raise click.UsageError(
                    f"argument {position} is not valid UTF-8 text", ctx=ctx
                ) from None
        return super().parse_args(ctx, args)


def _one_line(exc: click.UsageError) -> click.ClickException:
    """A usage error as one line with a pointer to ``--help``, not a usage block.

    The help click shows when a group is called without a command stays as it is.
    """
    # Click 8.2 and later show a group's help through this error; older ones do not raise.
    shows_help: tuple[type[BaseException], ...] = tuple(
        kind for kind in (getattr(click.exceptions, "NoArgsIsHelpError", None),) if kind
    )
    if isinstance(exc, shows_help) or exc.exit_code != EXIT_CONFIG:
        return exc  # a command with exit codes of its own (ask's 3) shows its errors itself
    hint = f" (see: {exc.ctx.command_path} --help)" if exc.ctx is not None else ""
    return ConfigurationError(f"{exc.format_message()}{hint}")


def settings_error(exc: ValidationError) -> str:
    """One line naming each setting that is wrong and why, never repeating a value.

    Args:
        exc: pydantic's error from reading the settings.

    Returns:
        E.g. ``invalid setting BIRDDOG_PAGE_SIZE: Input should be a valid integer``.
    """
    problems = []
    for error in exc.errors(include_input=False, include_url=False):
        location = [str(part) for part in error["loc"]]
        name = location[0] if location else ""
        # Settings are read by their variable names, so pydantic names those already.
        variable = name if name.isupper() else variable_of(name)
        reason = str(error["msg"]).removeprefix("Value error, ")
        problems.append(f"{variable}: {reason}" if name else reason)
    return "invalid setting " + "; ".join(problems)


def settings_of(ctx: click.Context) -> Settings:
    """The settings the ``main`` group read for this invocation."""
    settings: Settings = ctx.find_root().obj
    return settings


def announce(text: str) -> None:
    """Tell the person at the terminal one line, on stderr (stdout is for results)."""
    click.echo(text, err=True)


def announcer(ctx: click.Context) -> Callable[[str], None]:
    """Where a long-running command's notices go (the ready line, the embedded server).

    On a terminal they are plain lines; where logs are JSON lines they are a ``notice``
    event with the line as ``text``, so every line on stderr stays one JSON object.
    """
    if not renders_json(settings_of(ctx).log_format):
        return announce
    log = structlog.get_logger("birddog.cli")

    def notice(text: str) -> None:
        log.info("notice", text=text)

    return notice


def run(coro: Coroutine[Any, Any, T], *, resident: Settings | None = None) -> T:
    """Run ``coro`` to completion, turning BirdDog's errors into one line on stderr.

    A :class:`DatabaseRefused` or :class:`InvalidSetting` exits 2 (fix the
    configuration); any other :class:`BirdDogError` exits 1, and so does a statement the
    database refused (a missing grant, say), with the server's reason instead of a
    traceback; so does one it gave up for its own state (a deadlock), saying to run it
    again.

    Args:
        coro: what to run.
        resident: for the drain daemon, its settings: it runs on the event loop
            ``BIRDDOG_EVENT_LOOP`` names (uvloop when installed). Other commands, the
            worker included (its handlers may start process groups, which only the
            standard library's loop supports), run on the standard library's.
    """
    try:
        factory = event_loop_factory(resident.event_loop) if resident is not None else None
        with asyncio.Runner(loop_factory=factory) as runner:
            return runner.run(coro)
    except (DatabaseRefused, InvalidSetting) as exc:
        raise ConfigurationError(str(exc)) from exc
    except BirdDogError as exc:
        raise click.ClickException(_refused(exc) or str(exc)) from exc
    except Exception as exc:
        refused = _refused(exc)
        if refused is None:
            raise
        raise click.ClickException(refused) from exc


def _refused(exc: BaseException) -> str | None:
    """One line for a statement the database refused (a missing grant, say), else None.

    The database adapter knows a refusal and the server's reason; the command line knows
    only that it gets one line, not a traceback.
    """
    from birddog.bootstrap import refusal_reason, transient_reason  # noqa: PLC0415 - --help

    if (reason := refusal_reason(exc)) is not None:
        return f"the database refused: {reason}"
    if (reason := transient_reason(exc)) is not None:
        return f"the database gave up: {reason}"
    return None


def with_services(
    ctx: click.Context, action: Callable[[Services], Awaitable[T]], *, lazy: bool = False
) -> T:
    """Open the services (:func:`birddog.bootstrap.open_adapters`), run ``action``, close them.

    ``action`` sees them typed by their ports (:class:`~birddog.service.entry.Services`),
    never the concrete adapters: this is the one place the command line composes them.

    Args:
        ctx: the command's context (its settings).
        action: what to run over the services.
        lazy: connect only when ``action`` first needs the database (a sender, which
            spools what an unreachable database cannot take).
    """
    from birddog.bootstrap import open_adapters  # noqa: PLC0415 - keeps --help fast

    async def go() -> T:
        # With the embedded server, one line says who started it and whether it keeps
        # running (this command may have started it for its own life only).
        async with open_adapters(
            settings_of(ctx), pool_size=2, lazy=lazy, announce=announcer(ctx)
        ) as adapters:
            return await action(adapters)

    return run(go())


def checked_id(value: str, what: str) -> str:
    """An agent, session or job id from the command line, refused in one line when invalid.

    Args:
        value: the id as given.
        what: how the message names it (``AGENT_ID``).

    Returns:
        The id.

    Raises:
        click.BadParameter: it is empty, longer than 256 characters, or holds a control
            character; the message shows at most 200 characters of it.
    """
    if not 1 <= len(value) <= ID_MAX_LENGTH:
        raise click.BadParameter(
            f"{what} must be 1 to {ID_MAX_LENGTH} characters, not {len(value)}: {shown_key(value)}"
        )
    try:
        check_name(value)
    except ValueError as exc:
        raise click.BadParameter(f"{what} {exc}") from None
    return value


def agent_id_argument(_ctx: click.Context, param: click.Parameter, value: str) -> str:
    """Click callback for an ``AGENT_ID`` argument: see :func:`checked_id`."""
    return checked_id(value, (param.human_readable_name or "AGENT_ID").upper())


def print_rows(rows: list[dict[str, Any]], as_json: bool, columns: list[str]) -> None:
    """Print rows as JSON, or as an aligned table of ``columns`` with printable values."""
    click.echo(dump_json(rows) if as_json else render_table(rows, columns))


@click.group(
    cls=BirdDogGroup,
    context_settings={"auto_envvar_prefix": "BIRDDOG", "help_option_names": ["-h", "--help"]},
)
@click.version_option(package_name="birddog")
@click.option(
    "--database-url",
    envvar="DATABASE_URL",
    help="PostgreSQL DSN. Unset: an embedded server in the data directory.",
)
@click.option(
    "--log-format",
    type=click.Choice(["auto", "json", "console"]),
    default=None,
    help="Log renderer; auto: console on a terminal, else JSON.",
)
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
    except ValidationError as exc:
        raise ConfigurationError(settings_error(exc)) from None
    except ValueError as exc:  # pydantic-settings' own errors name the field, not the value
        raise ConfigurationError(f"invalid settings: {exc}") from None
    configure(log_format=settings.log_format, level=settings.log_level)
    ctx.obj = settings


def name_environment_twins(command: click.Command, prefix: str = "BIRDDOG") -> None:
    """Give every option an environment twin named after its flag, shown in ``--help``.

    ``--json`` of ``status`` reads ``BIRDDOG_STATUS_JSON``, ``--held`` of ``route add``
    reads ``BIRDDOG_ROUTE_ADD_HELD``: the flag's own name, whatever the Python parameter
    is called. Options that name their variable themselves (``--database-url`` reads
    ``DATABASE_URL``) keep it.

    Args:
        command: the command whose options (and subcommands) to name.
        prefix: the variable prefix of ``command``.
    """
    for param in command.params:
        if not isinstance(param, click.Option) or param.is_eager:
            continue
        if param.envvar is None:
            flag = max(param.opts, key=len).lstrip("-").replace("-", "_").upper()
            param.envvar = f"{prefix}_{flag}"
        param.show_envvar = True
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            name_environment_twins(sub, f"{prefix}_{name.replace('-', '_').upper()}")


# Each module adds its commands to ``main``: a new group of commands is one more line here.
from birddog.cli import a2a as a2a  # noqa: E402
from birddog.cli import agents as agents  # noqa: E402
from birddog.cli import ask as ask  # noqa: E402
from birddog.cli import console as console  # noqa: E402
from birddog.cli import daemon as daemon  # noqa: E402
from birddog.cli import database as database  # noqa: E402
from birddog.cli import demo as demo  # noqa: E402
from birddog.cli import health as health  # noqa: E402
from birddog.cli import jobs as jobs  # noqa: E402
from birddog.cli import listen as listen  # noqa: E402
from birddog.cli import mail as mail  # noqa: E402
from birddog.cli import mailbox as mailbox  # noqa: E402
from birddog.cli import mcp as mcp  # noqa: E402
from birddog.cli import ops as ops  # noqa: E402
from birddog.cli import prune as prune  # noqa: E402
from birddog.cli import routes as routes  # noqa: E402
from birddog.cli import secrets as secrets  # noqa: E402
from birddog.cli import spool as spool  # noqa: E402
from birddog.cli import worker as worker  # noqa: E402

# Last, once every command is registered.
name_environment_twins(main)

__all__ = [
    "EXIT_ALARM",
    "EXIT_CONFIG",
    "EXIT_OK",
    "BirdDogGroup",
    "ConfigurationError",
    "agent_id_argument",
    "announce",
    "announcer",
    "checked_id",
    "duration",
    "main",
    "name_environment_twins",
    "print_rows",
    "run",
    "settings_error",
    "settings_of",
    "wait_duration",
    "with_services",
]
