"""``birddog ask``: a durable question from the shell, answered through the asker's mailbox."""

from __future__ import annotations

import asyncio
import sys
from typing import TYPE_CHECKING, Any

import click

from birddog.cli import announce, main, wait_duration, with_adapters
from birddog.cli.mail import kind_option, priority_option, read_content
from birddog.cli.mailbox import printable_lines
from birddog.core.text import printable, shown_key

if TYPE_CHECKING:
    from birddog.bootstrap import Adapters
    from birddog.service.asked import Asked
    from birddog.service.waiting import Question

EXIT_ANSWERED = 0
"""The work completed; its content is on stdout."""

EXIT_NOT_COMPLETED = 1
"""The work ended another way (failed, interrupted, cancelled, outcome_unknown)."""

EXIT_NO_REPLY_YET = 2
"""No reply in time: it is still owed and will land in the asker's mailbox."""

EXIT_NOT_ASKED = 3
"""Nothing was asked: bad input, a refusal, or no database."""


class _NotAsked(click.ClickException):
    exit_code = EXIT_NOT_ASKED


class _NotAskedUsage(click.UsageError):
    exit_code = EXIT_NOT_ASKED


def _not_asked(exc: click.ClickException) -> click.ClickException:
    """The same error, exiting 3."""
    if isinstance(exc, click.UsageError):
        return _NotAskedUsage(exc.format_message(), ctx=exc.ctx)
    return _NotAsked(exc.format_message())


class AskCommand(click.Command):
    """A command whose refusals exit 3, keeping 2 for "no reply in time".

    Click's usage errors exit 2 and BirdDog's other errors 1, which here mean a reply
    still owed and a reply that did not complete; a script must never mistake a question
    that was not even asked for either.
    """

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        """Parse the arguments; a usage error exits 3."""
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except click.ClickException as exc:
            raise _not_asked(exc) from exc

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command; an error before the question was sent exits 3."""
        try:
            return super().invoke(ctx)
        except click.ClickException as exc:
            raise _not_asked(exc) from exc


@main.command(cls=AskCommand)
@click.option("--to", "to", required=True, metavar="AGENT:SESSION", help="Who is asked.")
@click.option(
    "--from",
    "from_",
    required=True,
    metavar="AGENT:SESSION",
    help="Who asks; its replies go to its mailbox (added when it has no route).",
)
@click.option(
    "--key",
    default=None,
    help="The mail key; the same key again is the same question (a replay). Unset: a new one.",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=wait_duration,
    default=240.0,
    show_default=True,
    help="How long to wait for the reply: seconds, or 90s, 4m, 1h; 0 does not wait.",
)
@priority_option
@kind_option(interactive_only=True)
@click.argument("question", required=False)
@click.pass_context
def ask(
    ctx: click.Context,
    to: str,
    from_: str,
    key: str | None,
    timeout_s: float,
    priority: int,
    kind: str | None,
    question: str | None,
) -> None:
    """Ask AGENT:SESSION a QUESTION (or stdin) and print the answer.

    The question is sent as a job whose reply goes to the asker's mailbox; a drain daemon
    must be running to deliver it. The target must be an agent BirdDog knows: one with a
    route, or whose session was sent work before. While the database cannot be reached,
    the question is kept in the local spool and the wait goes on: it is forwarded as soon
    as the database answers.

    \b
    Exit status:
      0  the work completed; the answer is on stdout
      1  it ended failed, interrupted, cancelled or outcome_unknown (stderr says why)
      2  no reply in time (or the database stayed away): stderr says where it stands
         (queued, and whether a worker beat lately; running, for how long; settled, its
         reply pending or dead; still in the local spool); it is still owed and will
         land in the asker's mailbox (birddog inbox AGENT:SESSION); ask again with the
         same --key to wait again
      3  nothing was asked: bad input, an unknown agent, an asker with an inbox URL
    """  # noqa: D301 - "\b" is click's mark for a paragraph it must not rewrap
    content = read_content(question, how="the question as an argument", empty="''")
    if not content.strip():
        raise click.UsageError("the question is empty: nothing was asked")

    async def go(adapters: Adapters) -> int:
        question = await adapters.sender.pose(
            to=to,
            from_=from_,
            content=content,
            key=key,
            timeout_s=timeout_s,
            priority=priority,
            kind=kind,
        )
        _tell_sent(question.asked, key_given=key is not None)
        return await _wait(question)

    sys.exit(with_adapters(ctx, go, lazy=True))


def _tell_sent(asked: Asked, *, key_given: bool) -> None:
    if asked.spooled:
        announce(
            f"spooled ({asked.spooled}): {printable(asked.key)}; it is forwarded once the database "
            "answers, and the wait goes on"
        )
    if asked.mailbox_added:
        announce(
            f"{asked.asker.agent_id} had no route: its replies now go to its mailbox "
            f"(birddog inbox {asked.asker_text})"
        )
    if asked.replay:
        announce(f"key {shown_key(asked.key)} was asked before: waiting for its reply")
    elif not key_given:
        announce(f"asked as key {asked.key} (--key {asked.key} asks the same again)")


async def _wait(question: Question) -> int:
    """Wait for the answer and report it; every way this ends has its exit status."""
    from birddog.core.errors import AskFailed, AskTimedOut, StoreUnavailable  # noqa: PLC0415
    from birddog.runtime import stop_on_signals  # noqa: PLC0415

    asked = question.asked
    owed = (
        f"the reply to {asked.key} is still owed and will land in the mailbox of "
        f"{asked.asker_text} (birddog inbox {asked.asker_text})"
    )
    with stop_on_signals() as stop:
        waiting = asyncio.ensure_future(question.answer())
        stopping = asyncio.ensure_future(stop.wait())
        await asyncio.wait({waiting, stopping}, return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        if not waiting.done():
            waiting.cancel()
            await asyncio.gather(waiting, return_exceptions=True)
            announce(f"stopped waiting: {owed}")
            return EXIT_NO_REPLY_YET
    try:
        answer = waiting.result()
    except AskFailed as exc:
        announce(printable(str(exc)))
        if exc.diagnostic is None and exc.content:
            announce(printable_lines(exc.content))
        return EXIT_NOT_COMPLETED
    except AskTimedOut as exc:
        announce(printable(str(exc)))
        return EXIT_NO_REPLY_YET
    except StoreUnavailable as exc:
        announce(f"{exc}; {owed}")
        return EXIT_NO_REPLY_YET
    text = printable_lines(answer) if sys.stdout.isatty() else answer
    click.echo(text, nl=not text.endswith("\n"))
    return EXIT_ANSWERED
