"""``birddog route ...``: where each agent's replies are posted, and holds."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import click

from birddog.cli import agent_id_argument, duration, main, with_services
from birddog.core.digests import DigestSchedule, check_every, parse_daily
from birddog.core.duration import format_age, parse_duration
from birddog.core.egress import shown_url
from birddog.core.errors import InvalidInput
from birddog.core.policy import RoutePolicy
from birddog.ports import Route

if TYPE_CHECKING:
    from birddog.service.entry import Services

BATCH_HELP = (
    "Put up to N due replies in one signed POST, acknowledged per key (1 to 1000; "
    "1: one reply per POST). The recipient must take batches: see the README."
)


DEFAULT = "default"
"""The value of a policy option that puts the daemon's default back."""

LIVE_GRACE_HELP = (
    "How long mail waits for a live session of this agent (an MCP server --as it, a worker "
    "--live) before another worker may take it, e.g. 2s (0: no wait). Default: 30s. "
    f"'{DEFAULT}' puts it back."
)


DIGEST_HELP = (
    "When this agent's informational mail (reports, receipts) goes, with no live session "
    "to take it at once: daily@HH:MM, a time of day in UTC, e.g. daily@08:00 (the default: "
    f"daily@08:00 UTC). '{DEFAULT}' puts it back."
)

DIGEST_EVERY_HELP = (
    "Or every DURATION (1m to 7d, e.g. 30m, 24h), counted from 00:00 UTC: every 30m is on "
    "the hour and at half past."
)


def _digest_options(command: Callable[..., None]) -> Callable[..., None]:
    """``--digest daily@HH:MM|default`` and ``--digest-every DURATION``."""
    command = click.option(
        "--digest-every", "digest_every", default=None, metavar="DURATION", help=DIGEST_EVERY_HELP
    )(command)
    return click.option(
        "--digest", "digest", default=None, metavar="daily@HH:MM", help=DIGEST_HELP
    )(command)


class _Digest(NamedTuple):
    """What ``--digest``/``--digest-every`` ask for: whether either was given, and what."""

    given: bool
    schedule: DigestSchedule | None  # None: the default


def _digest(digest: str | None, every: str | None) -> _Digest:
    """The schedule ``--digest``/``--digest-every`` give (None for ``default``).

    Raises:
        click.BadParameter: both given, or a value that is not a schedule.
    """
    if digest is not None and every is not None:
        raise click.BadParameter("give --digest or --digest-every, not both", param_hint="--digest")
    try:
        if every is not None:
            seconds = check_every(parse_duration(every, field="--digest-every"))
            return _Digest(given=True, schedule=DigestSchedule(every_s=seconds))
        if digest is None or digest == DEFAULT:
            return _Digest(given=digest is not None, schedule=None)
        return _Digest(given=True, schedule=parse_daily(digest))
    except InvalidInput as exc:
        hint = "--digest-every" if every is not None else "--digest"
        raise click.BadParameter(str(exc), param_hint=hint) from None


async def _set_digest(adapters: Services, agent_id: str, digest: _Digest) -> str:
    """Set the route's digest when one was given; ``, digest daily@08:00 UTC`` or ""."""
    if not digest.given:
        return ""
    return f", digest {await adapters.routes.digests.set_schedule(agent_id, digest.schedule)}"


def _live_grace(value: str | None) -> float | None:
    """``--live-grace``: the seconds given, None for ``default`` (or when not given).

    Raises:
        click.BadParameter: not a time from 0 to 24h.
    """
    if value is None or value == DEFAULT:
        return None
    from birddog.core.live import check_grace  # noqa: PLC0415 - keeps --help fast

    try:
        return check_grace(parse_duration(value, field="--live-grace"))
    except InvalidInput as exc:
        raise click.BadParameter(str(exc), param_hint="--live-grace") from None


async def _set_live_grace(adapters: Services, agent_id: str, value: str | None) -> str:
    """Set the route's live grace when ``--live-grace`` was given; ``, live grace 2s`` or ""."""
    if value is None:
        return ""
    grace_s = await adapters.live.set_grace(agent_id, _live_grace(value))
    return f", live grace {format_age(grace_s)}"


def _policy_options(command: Callable[..., None]) -> Callable[..., None]:
    """``--post-timeout``, ``--max-age`` and ``--max-attempts``: the route's own policy."""
    for flag, name, what in reversed(
        [
            (
                "--post-timeout",
                "post_timeout",
                "A post to this agent without an answer after this fails (e.g. 2s, 120s); "
                "shorter than BIRDDOG_LEASE_S. Default: BIRDDOG_POST_TIMEOUT_S.",
            ),
            (
                "--max-age",
                "max_age",
                "A reply to this agent older than this dies at its next failure (e.g. 6h). "
                "Default: BIRDDOG_MAX_AGE_S.",
            ),
            (
                "--max-attempts",
                "max_attempts",
                "Attempts before a reply to this agent dies (1 to 100,000). Default: "
                "BIRDDOG_MAX_ATTEMPTS.",
            ),
        ]
    ):
        command = click.option(
            flag, name, default=None, metavar="VALUE", help=f"{what} '{DEFAULT}' puts it back."
        )(command)
    return command


def _policy(
    post_timeout: str | None, max_age: str | None, max_attempts: str | None
) -> tuple[RoutePolicy, frozenset[str]]:
    """The policy the options set, and the fields they put back to the daemon's default.

    Raises:
        click.BadParameter: a value that is neither a duration (a count) nor ``default``.
    """
    given = {"post_timeout_s": post_timeout, "max_age_s": max_age, "max_attempts": max_attempts}
    cleared = frozenset(name for name, value in given.items() if value == DEFAULT)
    values: dict[str, Any] = {}
    for name, value in given.items():
        if value is None or value == DEFAULT:
            continue
        flag = "--" + name.removesuffix("_s").replace("_", "-")
        try:
            values[name] = int(value) if name == "max_attempts" else duration(value)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint=flag) from None
    try:
        return RoutePolicy(**values), cleared
    except InvalidInput as exc:
        raise click.BadParameter(str(exc)) from None


def policy_text(policy: RoutePolicy) -> str:
    """What a route overrides, for people: ``post timeout 2s, max age 6h``; "" for none."""
    parts = []
    if policy.post_timeout_s is not None:
        parts.append(f"post timeout {format_age(policy.post_timeout_s)}")
    if policy.max_age_s is not None:
        parts.append(f"max age {format_age(policy.max_age_s)}")
    if policy.max_attempts is not None:
        parts.append(f"max attempts {policy.max_attempts}")
    return ", ".join(parts)


def _with_policy(route: Route) -> str:
    """`` (post timeout 2s, ...)`` for a route with a policy of its own, nothing otherwise."""
    text = policy_text(route.policy)
    return f" ({text})" if text else ""


def _batched(route: Route, prefix: str = ", ") -> str:
    """``, batches of N`` for a batching route, nothing otherwise."""
    if route.batch_size <= 1:
        return ""
    close = ")" if prefix.endswith("(") else ""
    return f"{prefix}batches of {route.batch_size}{close}"


@main.group()
def route() -> None:
    """Manage routes: where each agent's replies are posted."""


@route.command("add")
@click.argument("agent_id", callback=agent_id_argument)
@click.argument("url", required=False)
@click.option(
    "--mailbox",
    is_flag=True,
    help="No URL: deliver into AGENT_ID's mailbox (read with `birddog inbox`, used by `ask`).",
)
@click.option("--secret", default=None, help="whsec_... signing secret; generated when unset.")
@click.option("--held", is_flag=True, help="Add it held (replies wait until released).")
@click.option("--batch", "batch_size", type=int, default=1, show_default=True, help=BATCH_HELP)
@click.option("--live-grace", "live_grace", default=None, metavar="DURATION", help=LIVE_GRACE_HELP)
@_digest_options
@_policy_options
@click.pass_context
def route_add(
    ctx: click.Context,
    agent_id: str,
    url: str | None,
    mailbox: bool,
    secret: str | None,
    held: bool,
    batch_size: int,
    live_grace: str | None,
    digest: str | None,
    digest_every: str | None,
    post_timeout: str | None,
    max_age: str | None,
    max_attempts: str | None,
) -> None:
    """Route AGENT_ID's replies to URL (prints the signing secret once), or to its --mailbox.

    --post-timeout, --max-age and --max-attempts override the daemon's defaults for this
    agent only. --digest (daily@HH:MM, UTC) or --digest-every says when its informational
    mail goes as one turn when no live session takes it first (default: daily@08:00 UTC).
    """
    state = "held" if held else "enabled"
    policy, _ = _policy(post_timeout, max_age, max_attempts)
    _live_grace(live_grace)  # refused before anything is written
    schedule = _digest(digest, digest_every)
    if mailbox:
        if url is not None or secret is not None or batch_size != 1:
            raise click.UsageError("a --mailbox route takes no URL, no --secret and no --batch")

        async def add_mailbox(adapters: Services) -> tuple[Route, str]:
            made = await adapters.routes.add(
                agent_id, enabled=not held, kind="mailbox", policy=policy
            )
            grace = await _set_live_grace(adapters, agent_id, live_grace)
            return made, grace + await _set_digest(adapters, agent_id, schedule)

        added, grace = with_services(ctx, add_mailbox)
        click.echo(
            f"route {agent_id} -> mailbox ({state}{grace}){_with_policy(added)}; "
            f"read it with: birddog inbox {agent_id}"
        )
        return
    if url is None:
        raise click.UsageError("give the inbox URL, or --mailbox")

    async def add_http(adapters: Services) -> tuple[Route, str]:
        made = await adapters.routes.add(
            agent_id, url, secret=secret, enabled=not held, batch_size=batch_size, policy=policy
        )
        grace = await _set_live_grace(adapters, agent_id, live_grace)
        return made, grace + await _set_digest(adapters, agent_id, schedule)

    added, grace = with_services(ctx, add_http)
    click.echo(
        f"route {added.agent_id} -> {shown_url(added.url)} ({state}{_batched(added)}{grace})"
        f"{_with_policy(added)}"
    )
    click.echo(f"signing secret: {added.secret}")


@route.command("update")
@click.argument("agent_id", callback=agent_id_argument)
@click.option("--url", default=None, help="The new inbox URL.")
@click.option("--secret", default=None, help="The new whsec_... signing secret.")
@click.option("--batch", "batch_size", type=int, default=None, help=BATCH_HELP)
@click.option("--live-grace", "live_grace", default=None, metavar="DURATION", help=LIVE_GRACE_HELP)
@_digest_options
@_policy_options
@click.pass_context
def route_update(
    ctx: click.Context,
    agent_id: str,
    url: str | None,
    secret: str | None,
    batch_size: int | None,
    live_grace: str | None,
    digest: str | None,
    digest_every: str | None,
    post_timeout: str | None,
    max_age: str | None,
    max_attempts: str | None,
) -> None:
    """Change AGENT_ID's inbox URL, signing secret, batch size, live grace, digest or policy.

    A new --digest or --digest-every applies to informational mail sent from then on; mail
    already waiting keeps its digest time.
    """
    policy, cleared = _policy(post_timeout, max_age, max_attempts)
    _live_grace(live_grace)  # refused before anything is written
    schedule = _digest(digest, digest_every)
    routed = url is not None or secret is not None or batch_size is not None
    timed = live_grace is not None or schedule.given
    if not routed and policy.empty and not cleared and not timed:
        raise click.UsageError(
            "nothing to change: give --url, --secret, --batch, --live-grace, --digest, "
            "--digest-every, --post-timeout, --max-age or --max-attempts"
        )

    async def update(adapters: Services) -> tuple[Route | None, str]:
        changed = None
        if routed or not policy.empty or cleared:
            changed = await adapters.routes.update(
                agent_id,
                url=url,
                secret=secret,
                batch_size=batch_size,
                policy=policy,
                cleared=cleared,
            )
        grace = await _set_live_grace(adapters, agent_id, live_grace)
        return changed, grace + await _set_digest(adapters, agent_id, schedule)

    updated, grace = with_services(ctx, update)
    if updated is None:
        click.echo(f"route {agent_id}: {grace.removeprefix(', ')}")
        return
    where = shown_url(updated.url) if updated.kind == "http" else "mailbox"
    click.echo(
        f"route {updated.agent_id} -> {where}{_batched(updated, ' (')}{_with_policy(updated)}"
        f"{grace}"
    )


def _overlap(_ctx: click.Context, _param: click.Parameter, value: str) -> float:
    try:
        return parse_duration(value, field="--overlap")
    except InvalidInput as exc:
        raise click.BadParameter(str(exc)) from None


@route.command("rotate")
@click.argument("agent_id", callback=agent_id_argument)
@click.option(
    "--overlap",
    "overlap_s",
    default="24h",
    show_default=True,
    callback=_overlap,
    help="How long the old secret keeps signing beside the new one (e.g. 24h, 0).",
)
@click.pass_context
def route_rotate(ctx: click.Context, agent_id: str, overlap_s: float) -> None:
    """Give AGENT_ID a new signing secret (printed once); the old one signs until --overlap ends."""
    rotated = with_services(ctx, lambda s: s.routes.rotate(agent_id, overlap_s=overlap_s))
    until = rotated.previous_secret_until
    click.echo(f"route {rotated.agent_id}: new signing secret: {rotated.secret}")
    if overlap_s > 0 and until is not None:
        click.echo(
            f"posts carry both signatures until {until.isoformat(timespec='seconds')}; "
            "give the recipient the new secret before then (its inbox may accept both)"
        )
    else:
        click.echo("the old secret no longer signs")


@route.command("list")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def route_list(ctx: click.Context, as_json: bool) -> None:
    """List routes (secrets, URL passwords and query strings are never shown), with digests."""

    async def listed(adapters: Services) -> tuple[list[Route], dict[str, DigestSchedule]]:
        return await adapters.routes.list(), await adapters.routes.digests.schedules()

    routes, digests = with_services(ctx, listed)
    rows = [
        {
            "agentId": r.agent_id,
            "kind": r.kind,
            "url": shown_url(r.url),
            "enabled": r.enabled,
            "batchSize": r.batch_size,
            "postTimeoutS": r.policy.post_timeout_s,
            "maxAgeS": r.policy.max_age_s,
            "maxAttempts": r.policy.max_attempts,
            "digest": _digest_json(digests.get(r.agent_id)),
        }
        for r in routes
    ]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    for row, r in zip(rows, routes, strict=True):
        where = row["url"] if row["kind"] == "http" else f"({row['kind']})"
        state = "enabled" if row["enabled"] else "HELD"
        policy = policy_text(r.policy)
        digest = digests.get(r.agent_id)
        click.echo(
            f"{row['agentId']}\t{state}\t{where}{_batched(r, chr(9))}"
            f"{chr(9) + policy if policy else ''}{chr(9) + f'digest {digest}' if digest else ''}"
        )


def _digest_json(schedule: DigestSchedule | None) -> dict[str, str | float | None] | None:
    """A route's digest in ``route list --json``: ``{"daily": "08:00"}`` or ``{"everyS": 1800}``."""
    if schedule is None:
        return None
    if schedule.daily is not None:
        return {"daily": schedule.daily.strftime("%H:%M"), "everyS": None}
    return {"daily": None, "everyS": schedule.every_s}


@route.command("hold")
@click.argument("agent_id", callback=agent_id_argument)
@click.pass_context
def route_hold(ctx: click.Context, agent_id: str) -> None:
    """Hold AGENT_ID: its replies stay, untouched, until released."""
    with_services(ctx, lambda s: s.routes.hold(agent_id))
    click.echo(f"held {agent_id}")


@route.command("release")
@click.argument("agent_id", callback=agent_id_argument)
@click.pass_context
def route_release(ctx: click.Context, agent_id: str) -> None:
    """Release AGENT_ID: its waiting replies are delivered."""
    with_services(ctx, lambda s: s.routes.release(agent_id))
    click.echo(f"released {agent_id}")


@route.command("remove")
@click.argument("agent_id", callback=agent_id_argument)
@click.pass_context
def route_remove(ctx: click.Context, agent_id: str) -> None:
    """Remove AGENT_ID's route (its future replies die as unknown recipients)."""
    with_services(ctx, lambda s: s.routes.remove(agent_id))
    click.echo(f"removed {agent_id}")
