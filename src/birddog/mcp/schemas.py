"""What the MCP tools declare: titles, annotations, argument and result schemas, the bounds.

:data:`TOOLS` is the one description of each tool that ``tools/list`` hands a client:
a title, a description, the specification's annotations (``readOnlyHint``,
``destructiveHint``, ``idempotentHint``, ``openWorldHint``), every argument with its
own description, and the JSON Schema of its structured content. The output schemas
list every field any successful result can carry and allow no other
(``additionalProperties: false``), so a client that validates them (the TypeScript
SDK does, for every host built on it) accepts every result; a tool error carries no
structured content at all (see :mod:`birddog.mcp.texts`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from birddog.core.ask_facts import AskState
from birddog.core.kinds import Kind
from birddog.core.mail import Outcome

DEFAULT_WAIT_S: Final = 45.0
"""How long ``ask`` and ``wait`` wait by default: well inside a client's 60 s patience."""

MAX_WAIT_S: Final = 240.0
"""The longest ``wait_s`` a caller may ask for."""

PROGRESS_S: Final = 5.0
"""While waiting, a progress notification goes out at least this often."""

CONTENT_PREVIEW_CHARS: Final = 2000
"""``inbox`` cuts each reply's content to this many characters (``read`` gives it whole)."""

INBOX_MAX_BYTES: Final = 20_000
"""The most UTF-8 bytes of JSON one ``inbox`` result's replies take. The text block
carries the same JSON again (:mod:`birddog.mcp.texts`), so a whole result stays near
twice this: far below a client's ~25,000 token cut, whatever the script of the replies."""

INBOX_MAX_LIMIT: Final = 100
"""The most replies one ``inbox`` call may ask for."""

SPOOLED: Final = "spooled"
"""The ``state`` of a pending ask whose mail waits in this host's spool."""

# ---- the parts ------------------------------------------------------------------------

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
_TEXT_OR_NULL = {"type": ["string", "null"]}
_TEXTS = {"type": "array", "items": _TEXT}
_OUTCOMES = [str(outcome) for outcome in Outcome]


def _shape(required: Sequence[str], **properties: Any) -> dict[str, Any]:
    """The JSON Schema of an object with exactly these properties (these ones required)."""
    return {
        "type": "object",
        "properties": properties,
        "required": list(required),
        "additionalProperties": False,
    }


def _hints(
    *, read_only: bool, idempotent: bool = False, open_world: bool = False
) -> dict[str, Any]:
    """The specification's annotations; no BirdDog tool deletes or overwrites anything."""
    return {
        "readOnlyHint": read_only,
        "destructiveHint": False,
        "idempotentHint": read_only or idempotent,
        "openWorldHint": open_world,
    }


_REPLY = _shape(
    ["key", "in_reply_to", "from", "outcome", "content", "truncated", "read"],
    key={"type": "string", "description": "The reply's key (read and ack take it)."},
    in_reply_to={"type": "string", "description": "The key of the mail it answers."},
    **{"from": {**_TEXT_OR_NULL, "description": "Who answered, AGENT:SESSION."}},
    outcome={"type": "string", "enum": _OUTCOMES},
    content=_TEXT,
    diagnostic={"type": "string", "description": "Why the work did not complete."},
    truncated={"type": "boolean", "description": "True when content was cut (read: whole)."},
    read={"type": "boolean", "description": "True once acked."},
)

_ANSWER_OUT = _shape(
    ["status", "key"],
    status={"type": "string", "enum": ["answered", "pending"]},
    key=_TEXT,
    outcome={"type": "string", "enum": [str(Outcome.COMPLETED)]},
    content={"type": "string", "description": "The answer (status answered)."},
    state={
        "type": "string",
        "enum": [*(str(state) for state in AskState), SPOOLED],
        "description": "Where a pending ask stands.",
    },
    message={"type": "string", "description": "What a pending ask waits for, and what to do."},
)

_STORY_REPLY = _shape(
    ["key", "to", "state", "attempts"],
    key=_TEXT,
    to=_TEXT,
    state={"type": "string", "enum": ["pending", "delivered", "dead"]},
    attempts={"type": ["integer", "null"]},
    reason={"type": "string", "description": "The last error, or why it died."},
)

TOOLS: Final[dict[str, dict[str, Any]]] = {
    "send": {
        "title": "Send mail",
        "description": "Send mail to an agent session; its replies land in your mailbox "
        "(posted instead when your route is an inbox URL; or they go to reply_to). "
        "Returns at once.",
        "annotations": _hints(read_only=False, open_world=True),
        "input": {
            "properties": {
                "to": {**_ADDRESS, "description": "Who gets the mail, AGENT:SESSION."},
                "content": {"type": "string", "description": "What to say."},
                "key": {
                    **_KEY,
                    "description": "The mail's key (default: a fresh one); the same key "
                    "again is the same mail, sent once.",
                },
                "reply_to": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "Who gets the replies (AGENT:SESSION each); default: "
                    "you; [] for no reply.",
                },
                "kind": {
                    "type": "string",
                    "enum": [str(kind) for kind in Kind],
                    "description": "What the mail is for (default task): task or escalation "
                    "when you want an answer soon; report or receipt when it only tells, "
                    "and can wait for the target's next batched turn.",
                },
            },
            "required": ["to", "content"],
        },
        "output": _shape(
            ["status", "key", "job_id"],
            status={"type": "string", "enum": ["sent", "already sent", "spooled"]},
            key=_TEXT,
            job_id=_TEXT,
            message={"type": "string", "description": "Why it waits in the spool."},
        ),
    },
    "ask": {
        "title": "Ask and wait for the answer",
        "description": "Ask an agent session a question and wait for its answer (durable: "
        "if it takes longer than wait_s you get status pending and the key, and the answer "
        "lands in your mailbox; call wait with the key). The first progress notification "
        "names the key at once.",
        "annotations": _hints(read_only=False, open_world=True),
        "input": {
            "properties": {
                "to": {**_ADDRESS, "description": "Who is asked, AGENT:SESSION."},
                "content": {"type": "string", "description": "The question."},
                "key": {
                    **_KEY,
                    "description": "The question's key (default: a fresh one); asking "
                    "again with it waits for the same answer.",
                },
                "wait_s": _WAIT,
            },
            "required": ["to", "content"],
        },
        "output": _ANSWER_OUT,
    },
    "wait": {
        "title": "Wait for a reply",
        "description": "Wait for the reply to a mail you sent or asked (by its key); the "
        "reply is marked read once given.",
        "annotations": _hints(read_only=False, idempotent=True),
        "input": {
            "properties": {
                "key": {**_KEY, "description": "The key send or ask gave."},
                "wait_s": _WAIT,
            },
            "required": ["key"],
        },
        "output": _ANSWER_OUT,
    },
    "inbox": {
        "title": "List your mailbox",
        "description": "The replies in your mailbox, oldest unread first; each content cut "
        f"to {CONTENT_PREVIEW_CHARS} characters (read gives one whole). Listing marks "
        "nothing read; ack does.",
        "annotations": _hints(read_only=True),
        "input": {
            "properties": {
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": INBOX_MAX_LIMIT,
                    "description": f"The most replies to list (default 20, at most "
                    f"{INBOX_MAX_LIMIT}).",
                },
                "unread_only": {
                    "type": "boolean",
                    "description": "List only unread replies (default true); false lists "
                    "the latest, read or not.",
                },
            },
        },
        "output": _shape(
            ["replies", "unread"],
            replies={"type": "array", "items": _REPLY},
            unread={"type": "integer", "description": "Unread replies in all."},
        ),
    },
    "read": {
        "title": "Read one reply",
        "description": "One reply in your mailbox, whole (by its reply key, or the key of "
        "the mail it answers). Reading marks nothing read; ack does.",
        "annotations": _hints(read_only=True),
        "input": {
            "properties": {
                "key": {
                    **_KEY,
                    "description": "A reply's key, or the key of the mail it answers.",
                }
            },
            "required": ["key"],
        },
        "output": _REPLY,
    },
    "ack": {
        "title": "Mark replies read",
        "description": "Mark replies read; acking twice is not an error.",
        "annotations": _hints(read_only=False, idempotent=True),
        "input": {
            "properties": {
                "keys": {
                    "type": "array",
                    "items": {"type": "string"},
                    "minItems": 1,
                    "description": "The replies' keys (inbox lists them).",
                }
            },
            "required": ["keys"],
        },
        "output": _shape(["acked"], acked=_TEXTS),
    },
    "next_task": {
        "title": "Take the next task",
        "description": "Take the oldest task queued for your session (one at a time); "
        "answer it with answer. Its lease is renewed while this connection lives.",
        "annotations": _hints(read_only=False, open_world=True),
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
            job_id={"type": "string", "description": "What answer takes."},
            key=_TEXT_OR_NULL,
            content={"type": "string", "description": "The task's mail."},
            **{"from": {**_TEXT_OR_NULL, "description": "Who sent it, AGENT:SESSION."}},
        ),
    },
    "answer": {
        "title": "Answer the task you took",
        "description": "Answer the task you took; the reply goes to everyone on its reply list.",
        "annotations": _hints(read_only=False, open_world=True),
        "input": {
            "properties": {
                "job_id": {"type": "string", "description": "The job_id next_task gave."},
                "content": {"type": "string", "description": "The reply."},
                "outcome": {
                    "type": "string",
                    "enum": ["completed", "failed"],
                    "description": "How the work ended (default completed).",
                },
                "diagnostic": {"type": "string", "description": "Why it failed."},
            },
            "required": ["job_id", "content"],
        },
        "output": _shape(
            ["status", "job_id", "replies"],
            status={"type": "string", "enum": ["settled"]},
            job_id=_TEXT,
            replies={**_TEXTS, "description": "The keys of the replies on their way."},
        ),
    },
    "status": {
        "title": "A mail's story",
        "description": "One mail's story in short: its job's state and outcome, and each "
        "reply pending, delivered or dead (with the reason).",
        "annotations": _hints(read_only=True),
        "input": {
            "properties": {"key": {**_KEY, "description": "The key of a mail of yours."}},
            "required": ["key"],
        },
        "output": _shape(
            ["key", "job_id", "state", "outcome", "replies"],
            key=_TEXT,
            job_id=_TEXT,
            state={"type": "string", "enum": ["queued", "running", "settled"]},
            outcome={"type": ["string", "null"], "enum": [*_OUTCOMES, None]},
            replies={"type": "array", "items": _STORY_REPLY},
        ),
    },
    "agents": {
        "title": "Agents you can reach",
        "description": "The agents you can reach: those with a route, by kind.",
        "annotations": _hints(read_only=True),
        "input": {"properties": {}},
        "output": _shape(
            ["agents"],
            agents={
                "type": "array",
                "items": _shape(
                    ["agent_id", "kind", "held"],
                    agent_id=_TEXT,
                    kind={"type": "string", "enum": ["inbox", "mailbox"]},
                    held={"type": "boolean", "description": "True while its mail is held."},
                ),
            },
        ),
    },
}
"""Each tool: its title, description, annotations, the properties and required names of
its arguments, and the JSON Schema of its structured content."""


def input_schema(name: str) -> dict[str, Any]:
    """The JSON Schema of tool ``name``'s arguments (no other argument is allowed)."""
    spec = TOOLS[name]["input"]
    return {
        "type": "object",
        "properties": spec["properties"],
        "required": spec.get("required", []),
        "additionalProperties": False,
    }


def output_schema(name: str) -> dict[str, Any]:
    """The JSON Schema of tool ``name``'s structured content."""
    schema: dict[str, Any] = TOOLS[name]["output"]
    return schema
