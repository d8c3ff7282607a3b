"""What the MCP tools do, for one caller: check the arguments, call the services, shape results.

Every tool is a method of :class:`AgentTools` and ends in a :class:`~birddog.mcp.texts.ToolResult`
(its text block and structured content follow :mod:`birddog.mcp.texts`), with
``is_error`` for what the caller must not mistake for an answer:

- An ask (or wait) whose work ended otherwise than ``completed`` is a tool error carrying
  the outcome, the bounded diagnostic and the reply; no reply in ``wait_s`` is
  ``pending`` with the key (never an error, never an answer); the reply still lands in
  the mailbox. An ask names its key in a first progress notification before it is sent,
  so a call the client gives up on still told it where the answer will be.
- Bad input is a tool error with one line naming the field and the rule, and nothing is
  written; the database away is a tool error that says so, except for ``send`` and
  ``ask``: their mail is kept in the local spool (``spooled``) and forwarded once the
  database answers. The server serves on.
- ``next_task`` and ``answer`` are the caller's turns (:mod:`birddog.mcp.tasks`).

The agent tools call the same services as the command line and never touches SQL: the mail
service (:class:`~birddog.service.mail.MailService`) sends, asks and waits, its deadlines
and fresh keys included; the rest are ports. Waiting steps report progress at least
every :data:`~birddog.mcp.schemas.PROGRESS_S` seconds through a callback. The tools'
declarations are :mod:`birddog.mcp.schemas`, their arguments :mod:`birddog.mcp.arguments`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import structlog

from birddog.core.ask import address_text, ask_job_id, parse_address
from birddog.core.errors import (
    AskFailed,
    AskTimedOut,
    BirdDogError,
    InvalidInput,
    JobConflict,
    JobNotFound,
    StoreUnavailable,
)
from birddog.core.mail import AgentAddress
from birddog.core.mailbox import MailboxEntry
from birddog.mcp.arguments import Arguments, ToolRefused, one_line, refused
from birddog.mcp.schemas import (
    CONTENT_PREVIEW_CHARS,
    DEFAULT_WAIT_S,
    INBOX_MAX_BYTES,
    INBOX_MAX_LIMIT,
    PROGRESS_S,
    SPOOLED,
    TOOLS,
)
from birddog.mcp.tasks import OnClose, TakenTasks
from birddog.mcp.texts import ToolResult, plural

if TYPE_CHECKING:
    from birddog.ports import Admin, AskStore, JobStore, Mailbox, Notices, RouteList
    from birddog.service.live import LiveAnnouncer
    from birddog.service.mail import MailService
    from birddog.service.waiting import Wait

log = structlog.get_logger("birddog.mcp")

STEP_TIMEOUT_S: Final = 10.0
"""The longest any step waits for a database connection."""

REPLY_IN_ERROR_CHARS: Final = 200
"""How much of a failed ask's reply its error line carries (the JSON after the line
carries all of it; ``read`` gives it too)."""

Progress = Callable[[float, float, str], Awaitable[None]]
"""Told ``(seconds waited, seconds it may wait, message)`` while a tool waits."""


@dataclass
class Services:
    """The services and ports the tools use (built by the composition root).

    Attributes:
        sender: the mail service: sends and asks (waits share the process's one
            listener), spooling what the database cannot take; it makes fresh keys.
        mailbox: the callers' mailboxes.
        asks: the ask store (mailbox routes, a mail by key).
        jobs: the job store (claim, heartbeat, settle, a job by id).
        admin: a mail's story.
        routes: the agents with a route (every one's summary for ``agents``; the
            caller's own for the rest; never a URL).
        notices: the process's listening connection (new tasks).
        lease_s: the lease a taken task holds between renewals.
        max_content_bytes: the largest content accepted.
        live: the live sessions this server announces (its ``--as`` session, each HTTP
            caller's while a connection of it lives); its holder is the worker id of the
            tasks taken, so their claims are never held back from them (None: none).
    """

    sender: MailService
    mailbox: Mailbox
    asks: AskStore
    jobs: JobStore
    admin: Admin
    routes: RouteList
    notices: Notices
    lease_s: float = 60.0
    max_content_bytes: int = 1_048_576
    live: LiveAnnouncer | None = None


async def _no_progress(_done: float, _total: float, _message: str) -> None:
    return None


class AgentTools:
    """The tools, for any caller; one per server process (it holds the callers' turns).

    Args:
        services: the adapters.
    """

    def __init__(self, services: Services) -> None:
        self.services = services
        self._tasks = TakenTasks(
            jobs=services.jobs,
            notices=services.notices,
            lease_s=services.lease_s,
            max_content_bytes=services.max_content_bytes,
            holder=None if services.live is None else services.live.holder,
        )

    async def call(
        self,
        name: str,
        arguments: Mapping[str, Any] | None,
        *,
        caller: AgentAddress,
        progress: Progress = _no_progress,
        on_close: OnClose | None = None,
    ) -> ToolResult:
        """Run tool ``name`` for ``caller``; every failure becomes a tool error.

        Args:
            name: the tool.
            arguments: its arguments as the client sent them.
            caller: the agent session calling (the MCP server's identity, or the token's).
            progress: told how a wait goes.
            on_close: registers what to do when the caller's connection ends.

        Returns:
            The result (``is_error`` for a refusal, a failure, a non-completed outcome).
        """
        if name not in TOOLS:
            return _error(ToolRefused(f"name: no tool {name!r} (tools: {', '.join(TOOLS)})"))
        try:
            args = Arguments(name, arguments)
            tool = getattr(self, f"_{name}")
            result: ToolResult = await tool(args, caller, progress=progress, on_close=on_close)
        except ToolRefused as exc:
            return _error(exc)
        except InvalidInput as exc:
            return _error(refused(exc))
        except StoreUnavailable as exc:
            log.warning("mcp_tool_store_unavailable", tool=name, error=type(exc).__name__)
            return _error(ToolRefused(f"the database is unreachable, nothing was done: {exc}"))
        except (JobConflict, BirdDogError) as exc:
            return _error(ToolRefused(str(exc)))
        except Exception as exc:  # a bug must not end the connection: the caller hears of it
            log.exception("mcp_tool_failed", tool=name, error=type(exc).__name__)
            return _error(ToolRefused(f"{name} failed inside BirdDog ({type(exc).__name__})"))
        return result

    async def instructions(self, caller: AgentAddress) -> str:
        """What the server says at initialize: who the caller is, what waits for it."""
        text = address_text(caller)
        try:
            unread = await self.services.mailbox.unread_count(caller, timeout_s=STEP_TIMEOUT_S)
            queued, _oldest = await self.services.jobs.queued_backlog(
                queues=[caller.session_id], digests=True
            )
            posted = await self._posts_to_url(caller)
        except StoreUnavailable:
            return (
                f"You are {text} on BirdDog, a durable mail room for agents. The database "
                "is unreachable right now, so what waits for you is unknown; tools say so."
            )
        return (
            f"You are {text} on BirdDog, a durable mail room for agents. You have "
            f"{unread} unread {plural(unread, 'reply', 'replies')} (inbox, read, ack) and "
            f"{queued} queued {plural(queued, 'task', 'tasks')} (next_task, then answer). "
            "ask waits for an answer at most wait_s, then gives status pending and the key: "
            "the answer still lands in your mailbox (wait with the key, or inbox). A tool "
            "error is never an answer."
            + (
                " Your route posts to an inbox URL: the replies to what you send go there, "
                "while the answer to an ask comes to this mailbox."
                if posted
                else ""
            )
        )

    async def _reply_comes_here(self, key: str, caller: AgentAddress) -> bool:
        """Whether the reply to ``key`` is (or will be) in ``caller``'s mailbox.

        Yes when the caller's route is a mailbox (or it has none), when the reply is there
        already, or when the mail is an ask (marked ``askerMailbox``: every ask is);
        otherwise it is posted to the caller's inbox URL, where no wait here can see it.
        Reads the caller's route only, never the others'. With the database away it
        cannot be told: the wait then goes on (and says where the mail stands).
        """
        try:
            if not await self._posts_to_url(caller):
                return True
            if await self.services.mailbox.wait(key, 0, owner=caller) is not None:
                return True
            job = await self.services.jobs.get(ask_job_id(key))
        except StoreUnavailable:
            return True
        except JobNotFound:
            return False
        return job.payload.get("askerMailbox") is True

    async def _posts_to_url(self, caller: AgentAddress) -> bool:
        """Whether ``caller``'s route posts its replies to an inbox URL (not a mailbox)."""
        routes = await self.services.routes.summaries(caller.agent_id)
        return any(route.kind != "mailbox" for route in routes)

    async def prepare(self, caller: AgentAddress) -> bool:
        """Give ``caller`` a mailbox route when it has none; True when one was added."""
        return await self.services.asks.ensure_mailbox(caller.agent_id, timeout_s=STEP_TIMEOUT_S)

    async def close(self) -> None:
        """Stop renewing every taken task (their leases then expire and recovery applies)."""
        await self._tasks.close()

    # ---- send, ask, wait --------------------------------------------------------------

    async def _send(self, args: Arguments, caller: AgentAddress, **_: Any) -> ToolResult:
        reply_to = args.texts("reply_to")
        # A send the database cannot take now is kept in the local spool ("spooled"); one
        # without a key gets a send's fresh key (mail-..., its job send:...).
        sent = await self.services.sender.send(
            to=args.required_text("to"),
            from_=caller,
            content=args.required_text("content"),
            key=args.text("key") or None,
            reply_to=reply_to,
            timeout_s=STEP_TIMEOUT_S,
            kind=args.text("kind"),
        )
        if sent.spooled:
            message = (
                f"spooled ({sent.spooled}): kept on this host's disk and forwarded once the "
                "database answers; its replies come as usual"
            )
            return ToolResult(
                {"status": "spooled", "key": sent.key, "job_id": sent.job_id, "message": message},
                f"spooled ({sent.spooled}): {sent.key} to {address_text(sent.to)}",
            )
        status = "already sent" if sent.replay else "sent"
        return ToolResult(
            {"status": status, "key": sent.key, "job_id": sent.job_id},
            f"{status}: {sent.key} to {address_text(sent.to)} (its replies follow your "
            "route: with a mailbox, inbox or wait with the key; an inbox URL has them posted)",
        )

    async def _ask(
        self, args: Arguments, caller: AgentAddress, *, progress: Progress, **_: Any
    ) -> ToolResult:
        wait_s = args.seconds("wait_s", default=DEFAULT_WAIT_S)
        to = args.required_text("to")
        content = args.required_text("content")
        key = args.text("key") or self.services.sender.new_key(asking=True)

        async def told(key: str) -> None:
            # The key first, before the send can keep the call waiting: a client that
            # gives up (or whose call is cancelled) has been told where the answer will be.
            await progress(0.0, wait_s, _asking(key, to))

        # wait_s bounds the whole call: the send's time comes off the wait. A busy pool
        # may keep the send waiting for a connection as long as the caller would wait for
        # the answer anyway (at least a step's usual bound).
        try:
            question = await self.services.sender.pose(
                to=to,
                from_=caller,
                content=content,
                key=key,
                timeout_s=wait_s,
                send_timeout_s=max(STEP_TIMEOUT_S, wait_s),
                on_key=told,
            )
        except asyncio.CancelledError:
            # The send goes on (the service logs how it ends); only the call ends.
            log.info("mcp_ask_cancelled", key=key, during="send")
            raise
        return await _answer_of(question, progress, spooled=question.asked.spooled)

    async def _wait(
        self, args: Arguments, caller: AgentAddress, *, progress: Progress, **_: Any
    ) -> ToolResult:
        key = args.required_text("key")
        wait_s = args.seconds("wait_s", default=DEFAULT_WAIT_S)
        mail = await self.services.sender.mail(key, timeout_s=STEP_TIMEOUT_S)
        if mail is None or caller not in mail.reply_to:
            raise ToolRefused(
                f"key: no mail with key {key!r} owes you a reply (send or ask gives a key)"
            )
        if not await self._reply_comes_here(key, caller):
            raise ToolRefused(
                f"key: the reply to {key!r} is posted to your inbox URL (your route), not "
                "kept in your mailbox, so wait cannot see it; only an ask's answer comes here"
            )
        return await _answer_of(
            self.services.sender.awaiting(key, caller, timeout_s=wait_s), progress
        )

    # ---- the mailbox ------------------------------------------------------------------

    async def _inbox(self, args: Arguments, caller: AgentAddress, **_: Any) -> ToolResult:
        limit = args.integer("limit", default=20, low=1, high=INBOX_MAX_LIMIT)
        unread_only = args.flag("unread_only", default=True)
        mailbox = self.services.mailbox
        # Counted first: a reply landing in between is listed, and counted below.
        unread = await mailbox.unread_count(caller, timeout_s=STEP_TIMEOUT_S)
        if unread_only:
            entries = await mailbox.read(caller.agent_id, caller.session_id, limit=limit)
        else:
            entries = await mailbox.latest(caller, limit=limit, timeout_s=STEP_TIMEOUT_S)
        unread = max(unread, sum(entry.read_at is None for entry in entries))
        replies: list[dict[str, Any]] = []
        size = len(json.dumps({"replies": [], "unread": unread}).encode())
        for entry in entries:
            shown = _reply(entry, cut=CONTENT_PREVIEW_CHARS)
            grows = len(json.dumps(shown, ensure_ascii=False).encode()) + 2
            if size + grows > INBOX_MAX_BYTES:
                break
            size += grows
            replies.append(shown)
        listed = "unread " if unread_only else ""
        return ToolResult(
            {"replies": replies, "unread": unread},
            f"{len(replies)} {listed}{plural(len(replies), 'reply', 'replies')} shown; "
            f"{unread} unread in all",
        )

    async def _read(self, args: Arguments, caller: AgentAddress, **_: Any) -> ToolResult:
        key = args.required_text("key")
        mailbox = self.services.mailbox
        found = (await mailbox.owned([key], caller, timeout_s=STEP_TIMEOUT_S)).get(key)
        if found is None:
            answers = await mailbox.replies([key], timeout_s=STEP_TIMEOUT_S)
            found = next((entry for entry in answers if entry.addressed_to(caller)), None)
        if found is None:
            raise ToolRefused(f"key: no reply in your mailbox has key {key!r}")
        return ToolResult(_reply(found, cut=None), f"reply {found.key}: {found.outcome}")

    async def _ack(self, args: Arguments, caller: AgentAddress, **_: Any) -> ToolResult:
        keys = args.texts("keys") or []
        if not keys:
            raise ToolRefused("keys: give at least one reply key")
        owned = await self.services.mailbox.owned(keys, caller, timeout_s=STEP_TIMEOUT_S)
        missing = [key for key in keys if key not in owned]
        if missing:
            raise ToolRefused(
                f"keys: no reply in your mailbox has key {missing[0]!r}; nothing was acked"
            )
        unread = [key for key, entry in owned.items() if entry.read_at is None]
        await self.services.mailbox.ack(unread, timeout_s=STEP_TIMEOUT_S)
        acked = list(dict.fromkeys(keys))
        return ToolResult({"acked": acked}, f"acked {len(acked)}")

    # ---- tasks --------------------------------------------------------------------------

    async def _next_task(
        self, args: Arguments, caller: AgentAddress, *, on_close: OnClose | None, **_: Any
    ) -> ToolResult:
        return await self._tasks.take(args, caller, on_close=on_close)

    async def _answer(self, args: Arguments, caller: AgentAddress, **_: Any) -> ToolResult:
        return await self._tasks.answer(args, caller)

    # ---- looking around ---------------------------------------------------------------

    async def _status(self, args: Arguments, caller: AgentAddress, **_: Any) -> ToolResult:
        key = args.required_text("key")
        story = await self.services.admin.story(key)
        jobs = [job for job in story.jobs if _concerns(job.get("mail"), caller)]
        if not jobs:
            raise ToolRefused(f"key: no mail of yours has key {key!r}")
        job = jobs[0]
        mail_key = job.get("mail_key")
        replies = [
            _story_reply(row, "delivered")
            for row in story.receipts
            if row.get("in_reply_to") == mail_key
        ]
        for row in story.replies:
            if row.get("in_reply_to") == mail_key:
                state = "dead" if row.get("state") == "dead" else "pending"
                shown = _story_reply(row, state)
                reason = row.get("dead_reason") if state == "dead" else row.get("last_error")
                if reason:
                    shown["reason"] = one_line(str(reason))
                replies.append(shown)
        replies.sort(key=lambda reply: str(reply["key"]))
        structured = {
            "key": mail_key,
            "job_id": job["job_id"],
            "state": job["state"],
            "outcome": job.get("outcome"),
            "replies": replies,
        }
        states = ", ".join(f"{reply['key']} {reply['state']}" for reply in replies) or "none"
        return ToolResult(
            structured,
            f"{mail_key}: job {job['state']} {job.get('outcome') or ''}".rstrip()
            + f"; replies: {states}",
        )

    async def _agents(self, args: Arguments, caller: AgentAddress, **_: Any) -> ToolResult:
        del args, caller
        routes = await self.services.routes.summaries()
        agents = [
            {
                "agent_id": route.agent_id,
                "kind": "mailbox" if route.kind == "mailbox" else "inbox",
                "held": not route.enabled,
            }
            for route in routes
        ]
        return ToolResult({"agents": agents}, f"{len(agents)} agents with a route")


def _concerns(mail: object, caller: AgentAddress) -> bool:
    """Whether the stored mail (without content) was sent, addressed or owed to ``caller``."""
    if isinstance(mail, str):
        try:
            mail = json.loads(mail)
        except ValueError:
            return False
    if not isinstance(mail, dict):
        return False
    me = {"kind": "agent", "agentId": caller.agent_id, "sessionId": caller.session_id}
    reply_to = mail.get("replyTo") or []
    return mail.get("from") == me or mail.get("to") == me or me in reply_to


def _story_reply(row: Mapping[str, Any], state: str) -> dict[str, Any]:
    return {
        "key": row["key"],
        "to": f"{row['recipient_agent_id']}:{row['recipient_session_id']}",
        "state": state,
        "attempts": row.get("attempts"),
    }


def _reply(entry: MailboxEntry, *, cut: int | None) -> dict[str, Any]:
    content = entry.content
    truncated = cut is not None and len(content) > cut
    sender = entry.sender
    shown: dict[str, Any] = {
        "key": entry.key,
        "in_reply_to": entry.in_reply_to,
        "from": None if sender is None else address_text(sender),
        "outcome": str(entry.outcome),
        "content": content[:cut] if truncated and cut is not None else content,
        "truncated": truncated,
        "read": entry.read_at is not None,
    }
    if entry.diagnostic is not None:
        shown["diagnostic"] = entry.diagnostic
    return shown


def _asking(key: str, to: str) -> str:
    """The first progress message of an ask: its key, before anything else happens."""
    return (
        f"asking {one_line(to)} as key {key}: if this call ends before the answer, call "
        f"wait with key {key} (the answer lands in your mailbox either way)"
    )


async def _answer_of(wait: Wait, progress: Progress, *, spooled: str | None = None) -> ToolResult:
    """The reply waited for, as a result: answered, or pending with the key (never empty).

    Args:
        wait: the wait (its deadline the whole call's).
        progress: told how the wait goes.
        spooled: why the question was spooled when it was sent (None: it was not).
    """
    key = wait.key

    async def told(waited_s: float, wait_s: float) -> None:
        await progress(waited_s, wait_s, f"waiting for the reply to {key}")

    try:
        content = await wait.answer(progress=told, every_s=PROGRESS_S)
    except AskTimedOut as exc:
        return _pending(exc, spooled=spooled)
    except AskFailed as exc:
        structured = {"status": "answered", "key": key, "outcome": exc.outcome}
        structured["content"] = exc.content
        if exc.diagnostic is not None:
            structured["diagnostic"] = exc.diagnostic
        said = f"; its reply: {exc.content[:REPLY_IN_ERROR_CHARS]}" if exc.content else ""
        raise ToolRefused(f"{exc} (key {key}){said}", structured) from None
    except asyncio.CancelledError:
        log.info("mcp_ask_cancelled", key=key, during="wait")
        raise
    return ToolResult(
        {"status": "answered", "key": key, "outcome": "completed", "content": content},
        f"answered: {key} (completed)",
    )


def _pending(exc: AskTimedOut, *, spooled: str | None) -> ToolResult:
    """No reply in time: the key, where the ask stands, and what to do (never an error)."""
    key = exc.key
    message = f"{exc}; call wait with key {key} to wait again (or look in inbox later)"
    if exc.spooled:
        why = f" ({spooled})" if spooled else ""
        message = (
            f"spooled{why}: the question {key} is kept on this host's disk and forwarded "
            f"once the database answers; {message}"
        )
    structured: dict[str, Any] = {"status": "pending", "key": key, "message": message}
    if exc.spooled:
        structured["state"] = SPOOLED
    elif exc.facts is not None:
        structured["state"] = str(exc.facts.state)
    return ToolResult(structured, f"pending: {key} (no answer yet; wait with this key)")


def _error(exc: ToolRefused) -> ToolResult:
    return ToolResult(exc.details, exc.line, is_error=True)


def callers_of(values: Sequence[str]) -> list[AgentAddress]:
    """``AGENT:SESSION`` texts as addresses (``--as`` and its kind)."""
    return [parse_address(value, "as") for value in values]
