"""What the MCP tools do, for one caller: check the arguments, call the adapters, shape results.

Every tool is a method of :class:`Desk` and ends in a :class:`ToolResult`: structured
content with the fields the tool promises, a one-line text for clients that show only
text, and ``is_error`` for what the caller must not mistake for an answer:

- An ask (or wait) whose work ended otherwise than ``completed`` is a tool error carrying
  the outcome and the bounded diagnostic; no reply in ``wait_s`` is ``pending`` with the
  key (never an error, never an answer); the reply still lands in the mailbox.
- Bad input is a tool error with one line naming the field and the rule, and nothing is
  written; the database away is a tool error that says so, except for ``send`` and
  ``ask``: their mail is kept in the local spool (``spooled``) and forwarded once the
  database answers. The server serves on.
- ``next_task`` claims the oldest queued job of the caller's own session with a lease the
  desk renews while the MCP connection that took it lives; ``answer`` settles it (a
  recorded cancellation wins), its replies fanned out in the same transaction.

The desk calls the same services as the command line and never touches SQL. Waiting
steps report progress at least every :data:`PROGRESS_S` seconds through a callback.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

import structlog

from birddog.core.ask import address_text, parse_address
from birddog.core.errors import (
    AskFailed,
    AskTimedOut,
    BirdDogError,
    InvalidInput,
    JobConflict,
    StaleClaim,
    StoreUnavailable,
)
from birddog.core.jobs import check_content_size, decode_agent_job
from birddog.core.lifecycle import SettleRequested
from birddog.core.mail import AgentAddress, Outcome
from birddog.core.mailbox import MailboxEntry
from birddog.core.model import check_text
from birddog.core.text import inert
from birddog.runtime import stop_task, wait_event

if TYPE_CHECKING:
    from birddog.ports import (
        Admin,
        AskStore,
        ClaimedJobLike,
        JobStore,
        Mailbox,
        Notices,
        RouteList,
    )
    from birddog.service.mail import MailService
    from birddog.service.waiting import Wait

log = structlog.get_logger("birddog.mcp")

DEFAULT_WAIT_S: Final = 45.0
"""How long ``ask`` and ``wait`` wait by default: well inside a client's 60 s patience."""

MAX_WAIT_S: Final = 240.0
"""The longest ``wait_s`` a caller may ask for."""

PROGRESS_S: Final = 5.0
"""While waiting, a progress notification goes out at least this often."""

CONTENT_PREVIEW_CHARS: Final = 2000
"""``inbox`` cuts each reply's content to this many characters (``read`` gives it whole)."""

INBOX_MAX_BYTES: Final = 40_000
"""The most UTF-8 bytes of JSON one ``inbox`` result holds: far below a client's ~25,000
token cut, whatever the script of the replies."""

INBOX_MAX_LIMIT: Final = 100
"""The most replies one ``inbox`` call may ask for."""

STEP_TIMEOUT_S: Final = 10.0
"""The longest any step waits for a database connection."""

ERROR_CHARS: Final = 400
"""A tool error's line is cut to this many characters."""

REPLY_IN_ERROR_CHARS: Final = 200
"""How much of a failed ask's reply its error line carries (clients that show only the
text of an error see that much; ``read`` gives the rest)."""

Progress = Callable[[float, float, str], Awaitable[None]]
"""Told ``(seconds waited, seconds it may wait, message)`` while a tool waits."""

OnClose = Callable[[Callable[[], Awaitable[None]]], None]
"""Registers what to do when the caller's MCP connection ends."""


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What one tool call comes to.

    Attributes:
        structured: the structured content (the fields the tool promises).
        text: one line for clients that show only text.
        is_error: True for a tool error (the caller must not read it as an answer).
    """

    structured: dict[str, Any]
    text: str
    is_error: bool = False


class ToolRefused(Exception):
    """A tool call refused or failed; its line says why (and names the field, if one).

    Attributes:
        line: the one line for the caller, inert and bounded.
        structured: structured content to send along (an outcome, a key).
    """

    def __init__(self, line: str, structured: Mapping[str, Any] | None = None) -> None:
        self.line = _line(line)
        self.structured = dict(structured or {})
        super().__init__(self.line)


def _line(text: str) -> str:
    one = " ".join(inert(text).split())
    return one if len(one) <= ERROR_CHARS else one[: ERROR_CHARS - 1] + "…"


# ---- the tools' schemas ---------------------------------------------------------------

_KEY = {"type": "string", "description": "A mail key (stable across retries)."}
_ADDRESS = {"type": "string", "description": "An agent session, AGENT:SESSION."}
_WAIT = {
    "type": "number",
    "minimum": 0,
    "maximum": MAX_WAIT_S,
    "description": f"Seconds to wait for the reply (default {DEFAULT_WAIT_S:g}, at most "
    f"{MAX_WAIT_S:g}); then status pending with the key.",
}
_TEXT = {"type": "string"}


def _shape(required: Sequence[str], **properties: Any) -> dict[str, Any]:
    """The JSON Schema of a structured result: an object with these properties."""
    return {"type": "object", "properties": properties, "required": list(required)}


_ANSWER_OUT = _shape(
    ["status", "key"],
    status={"type": "string", "enum": ["answered", "pending"]},
    key=_TEXT,
    outcome=_TEXT,
    content=_TEXT,
    diagnostic=_TEXT,
    message=_TEXT,
)

TOOLS: Final[dict[str, dict[str, Any]]] = {
    "send": {
        "description": "Send mail to an agent session; its replies land in your mailbox "
        "(or go to reply_to). Returns at once.",
        "input": {
            "properties": {
                "to": _ADDRESS,
                "content": {"type": "string", "description": "What to say."},
                "key": _KEY,
                "reply_to": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "Who gets the replies (AGENT:SESSION each); default: "
                    "you; [] for no reply.",
                },
            },
            "required": ["to", "content"],
        },
        "output": _shape(
            ["status", "key", "job_id"],
            status={"type": "string", "enum": ["sent", "already sent", "spooled"]},
            key=_TEXT,
            job_id=_TEXT,
            message=_TEXT,
        ),
    },
    "ask": {
        "description": "Ask an agent session a question and wait for its answer (durable: "
        "if it takes longer than wait_s you get status pending and the key, and the answer "
        "lands in your mailbox; call wait with the key).",
        "input": {
            "properties": {
                "to": _ADDRESS,
                "content": {"type": "string", "description": "The question."},
                "key": _KEY,
                "wait_s": _WAIT,
            },
            "required": ["to", "content"],
        },
        "output": _ANSWER_OUT,
    },
    "wait": {
        "description": "Wait for the reply to a mail you sent or asked (by its key).",
        "input": {"properties": {"key": _KEY, "wait_s": _WAIT}, "required": ["key"]},
        "output": _ANSWER_OUT,
    },
    "inbox": {
        "description": "The replies in your mailbox, oldest unread first; each content cut "
        f"to {CONTENT_PREVIEW_CHARS} characters (read gives one whole). Listing marks "
        "nothing read; ack does.",
        "input": {
            "properties": {
                "limit": {"type": "integer", "minimum": 1, "maximum": INBOX_MAX_LIMIT},
                "unread_only": {"type": "boolean"},
            },
        },
        "output": _shape(
            ["replies", "unread"], replies={"type": "array"}, unread={"type": "integer"}
        ),
    },
    "read": {
        "description": "One reply in your mailbox, whole (by its reply key, or the key of "
        "the mail it answers).",
        "input": {"properties": {"key": _KEY}, "required": ["key"]},
        "output": _shape(["key", "content"], key=_TEXT, content=_TEXT),
    },
    "ack": {
        "description": "Mark replies read; acking twice is not an error.",
        "input": {
            "properties": {"keys": {"type": "array", "items": {"type": "string"}, "minItems": 1}},
            "required": ["keys"],
        },
        "output": _shape(["acked"], acked={"type": "array", "items": _TEXT}),
    },
    "next_task": {
        "description": "Take the oldest task queued for your session (one at a time); "
        "answer it with answer. Its lease is renewed while this connection lives.",
        "input": {
            "properties": {
                "wait_s": {
                    "type": "number",
                    "minimum": 0,
                    "maximum": MAX_WAIT_S,
                    "description": "Seconds to wait for a task when none is queued (default 0).",
                }
            }
        },
        "output": _shape(
            ["status"],
            status={"type": "string", "enum": ["task", "none"]},
            job_id=_TEXT,
            key={"type": ["string", "null"]},
            content=_TEXT,
            **{"from": {"type": ["string", "null"]}},
        ),
    },
    "answer": {
        "description": "Answer the task you took; the reply goes to everyone on its reply list.",
        "input": {
            "properties": {
                "job_id": {"type": "string"},
                "content": {"type": "string"},
                "outcome": {"type": "string", "enum": ["completed", "failed"]},
                "diagnostic": {"type": "string", "description": "Why it failed."},
            },
            "required": ["job_id", "content"],
        },
        "output": _shape(
            ["status", "job_id", "replies"],
            status={"type": "string", "enum": ["settled"]},
            job_id=_TEXT,
            replies={"type": "array", "items": _TEXT},
        ),
    },
    "status": {
        "description": "One mail's story in short: its job's state and outcome, and each "
        "reply pending, delivered or dead (with the reason).",
        "input": {"properties": {"key": _KEY}, "required": ["key"]},
        "output": _shape(["key", "replies"], key=_TEXT, replies={"type": "array"}),
    },
    "agents": {
        "description": "The agents you can reach: those with a route, by kind.",
        "input": {"properties": {}},
        "output": _shape(["agents"], agents={"type": "array"}),
    },
}
"""Each tool: its description, the properties and required names of its arguments, and
the JSON Schema of its structured content."""


def input_schema(name: str) -> dict[str, Any]:
    """The JSON Schema of tool ``name``'s arguments (no other argument is allowed)."""
    spec = TOOLS[name]["input"]
    return {
        "type": "object",
        "properties": spec["properties"],
        "required": spec.get("required", []),
        "additionalProperties": False,
    }


# ---- arguments ------------------------------------------------------------------------


class Arguments:
    """A tool's arguments, read one by one; each wrong one refused naming it and the rule."""

    def __init__(self, tool: str, given: Mapping[str, Any] | None) -> None:
        allowed = set(TOOLS[tool]["input"]["properties"])
        self.given = dict(given or {})
        unknown = sorted(set(self.given) - allowed)
        if unknown:
            names = ", ".join(allowed) or "none"
            raise ToolRefused(f"{unknown[0]}: not an argument of {tool} (it takes: {names})")
        for required in TOOLS[tool]["input"].get("required", []):
            if self.given.get(required) is None:
                raise ToolRefused(f"{required}: required")

    def text(self, name: str, *, default: str | None = None) -> str | None:
        """A string argument (text with no NUL and no lone surrogate)."""
        value = self.given.get(name)
        if value is None:
            return default
        if not isinstance(value, str):
            raise ToolRefused(f"{name}: must be a string")
        try:
            check_text(value)
        except ValueError as exc:
            raise ToolRefused(f"{name}: {exc}") from None
        return value

    def required_text(self, name: str) -> str:
        """A required string argument."""
        value = self.text(name)
        if value is None:  # checked in __init__
            raise ToolRefused(f"{name}: required")
        return value

    def seconds(self, name: str, *, default: float) -> float:
        """A number of seconds between 0 and :data:`MAX_WAIT_S`."""
        value = self.given.get(name)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ToolRefused(f"{name}: must be a number of seconds")
        if not 0 <= value <= MAX_WAIT_S:
            raise ToolRefused(f"{name}: must be between 0 and {MAX_WAIT_S:g} seconds")
        return float(value)

    def integer(self, name: str, *, default: int, low: int, high: int) -> int:
        """An integer between ``low`` and ``high``."""
        value = self.given.get(name, default)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ToolRefused(f"{name}: must be an integer")
        if not low <= value <= high:
            raise ToolRefused(f"{name}: must be between {low} and {high}")
        return value

    def flag(self, name: str, *, default: bool) -> bool:
        """A boolean argument."""
        value = self.given.get(name, default)
        if not isinstance(value, bool):
            raise ToolRefused(f"{name}: must be true or false")
        return value

    def texts(self, name: str, *, most: int = 1000) -> list[str] | None:
        """A list of strings (None when not given)."""
        value = self.given.get(name)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise ToolRefused(f"{name}: must be a list of strings")
        if len(value) > most:
            raise ToolRefused(f"{name}: at most {most} items")
        for index, item in enumerate(value):
            try:
                check_text(item)
            except ValueError as exc:
                raise ToolRefused(f"{name}.{index}: {exc}") from None
        return list(value)


def refused(exc: InvalidInput) -> ToolRefused:
    """Bad input as a tool error: the field, then the rule."""
    where = exc.field.removeprefix("mail.").split(".")[0] if exc.field else "input"
    return ToolRefused(f"{where}: {exc}")


# ---- the desk -------------------------------------------------------------------------


@dataclass
class Services:
    """The services and ports the tools use (built by the composition root).

    Attributes:
        sender: the mail service: sends and asks (waits share the process's one
            listener), spooling what the database cannot take.
        mailbox: the callers' mailboxes.
        asks: the ask store (mailbox routes, a mail by key).
        jobs: the job store (claim, heartbeat, settle).
        admin: a mail's story.
        routes: the agents with a route.
        notices: the process's listening connection (new tasks).
        lease_s: the lease a taken task holds between renewals.
        max_content_bytes: the largest content accepted.
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


@dataclass
class _Turn:
    """A task a caller took: the claim, and the task renewing its lease."""

    claimed: ClaimedJobLike
    renewing: asyncio.Task[None] | None = None
    stopped: asyncio.Event = field(default_factory=asyncio.Event)


async def _no_progress(_done: float, _total: float, _message: str) -> None:
    return None


class _TakenTasks:
    """The tasks callers took (``next_task``): their claims, leases renewed, settled by ``answer``.

    Args:
        services: the adapters (the job store, the notices of new tasks, the lease).
    """

    def __init__(self, services: Services) -> None:
        self.services = services
        self._turns: dict[str, _Turn] = {}

    async def close(self) -> None:
        """Stop renewing every taken task (their leases then expire and recovery applies)."""
        for turn in list(self._turns.values()):
            await _stop(turn)
        self._turns.clear()

    async def take(
        self, args: Arguments, caller: AgentAddress, *, on_close: OnClose | None
    ) -> ToolResult:
        """``next_task``: claim the oldest task queued for ``caller`` and renew its lease."""
        wait_s = args.seconds("wait_s", default=0.0)
        text = address_text(caller)
        turn = self._turns.get(text)
        if turn is not None:
            if await self._still_held(turn):
                return _no_task("you hold a task already: answer it first")
            await _stop(turn)
            self._turns.pop(text, None)
        claimed = await self._claim(caller, wait_s)
        if claimed is None:
            return _no_task("no task is queued for your session")
        turn = _Turn(claimed)
        self._turns[text] = turn
        turn.renewing = asyncio.create_task(
            self._renew(turn), name=f"birddog-mcp-lease-{claimed.job.job_id}"
        )
        if on_close is not None:
            on_close(lambda: _stop(turn))
        mail = decode_agent_job(claimed.job).mail
        structured = {
            "status": "task",
            "job_id": claimed.job.job_id,
            "key": None if mail is None else mail.key,
            "from": None if mail is None else address_text(mail.from_),
            "content": "" if mail is None else mail.content,
        }
        return ToolResult(structured, f"task {claimed.job.job_id} taken")

    async def _claim(self, caller: AgentAddress, wait_s: float) -> ClaimedJobLike | None:
        jobs = self.services.jobs
        queue = caller.session_id
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        with self.services.notices.subscribe("birddog_jobs", queue) as queued:
            while True:
                claimed = await jobs.claim(
                    queues=[queue], lease_s=self.services.lease_s, worker_id=f"mcp:{queue}"
                )
                left = deadline - loop.time()
                if claimed is not None or left <= 0:
                    return claimed
                await queued.wait(min(left, 1.0))

    async def _heartbeat(self, turn: _Turn) -> None:
        """Renew a taken task's lease now (StaleClaim: the claim has ended)."""
        await self.services.jobs.heartbeat(
            job_id=turn.claimed.job.job_id,
            claim_token=turn.claimed.claim_token,
            lease_s=self.services.lease_s,
        )

    async def _still_held(self, turn: _Turn) -> bool:
        try:
            await self._heartbeat(turn)
        except StaleClaim:
            return False
        return not turn.stopped.is_set()

    async def _renew(self, turn: _Turn) -> None:
        """Renew the lease every third of it until the turn ends or the connection does."""
        every_s = max(self.services.lease_s / 3, 0.05)
        while not turn.stopped.is_set():
            if await wait_event(turn.stopped, every_s):
                return
            try:
                await self._heartbeat(turn)
            except StaleClaim:
                return
            except StoreUnavailable as exc:
                log.warning("mcp_lease_renewal_failed", error=type(exc).__name__)

    async def answer(self, args: Arguments, caller: AgentAddress) -> ToolResult:
        """``answer``: settle the task ``caller`` took (a recorded cancellation wins)."""
        job_id = args.required_text("job_id")
        content = args.required_text("content")
        outcome_text = args.text("outcome", default="completed")
        diagnostic = args.text("diagnostic")
        if outcome_text not in ("completed", "failed"):
            raise ToolRefused("outcome: must be completed or failed")
        check_content_size(content, limit_bytes=self.services.max_content_bytes)
        text = address_text(caller)
        turn = self._turns.get(text)
        if turn is None or turn.claimed.job.job_id != job_id:
            raise ToolRefused(
                f"job_id: {job_id!r} is not a task you took (next_task gives one); "
                "nothing was written"
            )
        outcome = Outcome(outcome_text)
        try:
            finished = await self.services.jobs.finish(
                job_id=job_id,
                claim_token=turn.claimed.claim_token,
                event=SettleRequested(outcome, content, diagnostic),
            )
        except StaleClaim:
            await _stop(turn)
            self._turns.pop(text, None)
            raise ToolRefused(
                f"job_id: your claim on {job_id!r} ended (its lease expired and it was "
                "recovered, or it was settled); nothing was written"
            ) from None
        await _stop(turn)
        self._turns.pop(text, None)
        if finished.outcome == Outcome.CANCELLED:
            raise ToolRefused(
                f"job {job_id} was cancelled before your answer: the cancellation was "
                "sent to its correspondents, not your answer",
                {"status": "settled", "job_id": job_id, "replies": finished.keys},
            )
        return ToolResult(
            {"status": "settled", "job_id": job_id, "replies": finished.keys},
            f"settled {job_id}: {len(finished.keys)} "
            f"{_plural(len(finished.keys), 'reply', 'replies')} on their way",
        )


class Desk:
    """The tools, for any caller; one per server process (it holds the callers' turns).

    Args:
        services: the adapters.
    """

    def __init__(self, services: Services) -> None:
        self.services = services
        self._tasks = _TakenTasks(services)

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
            queued, _oldest = await self.services.jobs.queued_backlog(queues=[caller.session_id])
        except StoreUnavailable:
            return (
                f"You are {text} on BirdDog, a durable mail room for agents. The database "
                "is unreachable right now, so what waits for you is unknown; tools say so."
            )
        return (
            f"You are {text} on BirdDog, a durable mail room for agents. You have "
            f"{unread} unread {_plural(unread, 'reply', 'replies')} (inbox, read, ack) and "
            f"{queued} queued {_plural(queued, 'task', 'tasks')} (next_task, then answer). "
            "ask waits for an answer at most wait_s, then gives status pending and the key: "
            "the answer still lands in your mailbox (wait with the key, or inbox). A tool "
            "error is never an answer."
        )

    async def prepare(self, caller: AgentAddress) -> bool:
        """Give ``caller`` a mailbox route when it has none; True when one was added."""
        return await self.services.asks.ensure_mailbox(caller.agent_id, timeout_s=STEP_TIMEOUT_S)

    async def close(self) -> None:
        """Stop renewing every taken task (their leases then expire and recovery applies)."""
        await self._tasks.close()

    # ---- send, ask, wait --------------------------------------------------------------

    async def _send(self, args: Arguments, caller: AgentAddress, **_: Any) -> ToolResult:
        reply_to = args.texts("reply_to")
        # A send the database cannot take now is kept in the local spool ("spooled").
        sent = await self.services.sender.send(
            to=args.required_text("to"),
            from_=caller,
            content=args.required_text("content"),
            key=args.text("key"),
            reply_to=reply_to,
            timeout_s=STEP_TIMEOUT_S,
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
            f"{status}: {sent.key} to {address_text(sent.to)}",
        )

    async def _ask(
        self, args: Arguments, caller: AgentAddress, *, progress: Progress, **_: Any
    ) -> ToolResult:
        wait_s = args.seconds("wait_s", default=DEFAULT_WAIT_S)
        # wait_s bounds the whole call: the send's time comes off the wait. A busy pool
        # may keep the send waiting for a connection as long as the caller would wait for
        # the answer anyway (at least a step's usual bound).
        question = await self.services.sender.pose(
            to=args.required_text("to"),
            from_=caller,
            content=args.required_text("content"),
            key=args.text("key"),
            timeout_s=wait_s,
            send_timeout_s=max(STEP_TIMEOUT_S, wait_s),
        )
        return await _answer_of(question, progress)

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
            f"{len(replies)} {listed}{_plural(len(replies), 'reply', 'replies')} shown; "
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
                    shown["reason"] = _line(str(reason))
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
        routes = await self.services.routes.list()
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


async def _answer_of(wait: Wait, progress: Progress) -> ToolResult:
    """The reply waited for, as a result: answered, or pending with the key (never empty)."""
    key = wait.key

    async def told(waited_s: float, wait_s: float) -> None:
        await progress(waited_s, wait_s, f"waiting for the reply to {key}")

    try:
        content = await wait.answer(progress=told, every_s=PROGRESS_S)
    except AskTimedOut as exc:
        return _pending(exc)
    except AskFailed as exc:
        structured = {"status": "answered", "key": key, "outcome": exc.outcome}
        structured["content"] = exc.content
        if exc.diagnostic is not None:
            structured["diagnostic"] = exc.diagnostic
        said = f"; its reply: {exc.content[:REPLY_IN_ERROR_CHARS]}" if exc.content else ""
        raise ToolRefused(f"{exc} (key {key}){said}", structured) from None
    return ToolResult(
        {"status": "answered", "key": key, "outcome": "completed", "content": content},
        f"answered: {key}",
    )


def _pending(exc: AskTimedOut) -> ToolResult:
    message = f"{exc}; call wait with key {exc.key} to wait again (or look in inbox later)"
    structured: dict[str, Any] = {"status": "pending", "key": exc.key, "message": message}
    if exc.facts is not None:
        structured["state"] = str(exc.facts.state)
    return ToolResult(structured, f"pending: {exc.key}")


def _no_task(why: str) -> ToolResult:
    return ToolResult({"status": "none"}, f"no task: {why}")


def _error(exc: ToolRefused) -> ToolResult:
    return ToolResult(exc.structured, exc.line, is_error=True)


def _plural(count: int, one: str, many: str) -> str:
    return one if count == 1 else many


async def _stop(turn: _Turn) -> None:
    turn.stopped.set()
    task = turn.renewing
    if task is not None and task is not asyncio.current_task():
        await stop_task(task)


def callers_of(values: Sequence[str]) -> list[AgentAddress]:
    """``AGENT:SESSION`` texts as addresses (``--as`` and its kind)."""
    return [parse_address(value, "as") for value in values]
