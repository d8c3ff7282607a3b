"""Receive BirdDog replies in your own aiohttp app: verify, store durably, then acknowledge.

Run it, and route an agent's replies to it::

    birddog route add alice http://127.0.0.1:8080/inbox      # prints alice's secret
    python examples/receive_replies.py --secret whsec_... --port 8080 --store replies.jsonl

Each verified reply is appended to the JSON-lines file ``--store`` and flushed to disk
before the inbox answers ``{"accepted": true}``; BirdDog turns that answer into a
receipt. Delivery is at least once, so reply keys already in the file are acknowledged
again without a second copy, even after this process restarts. With ``--sent`` (a
JSON-lines file of the mails you sent, in BirdDog's JSON), each reply is also checked
against the mail it answers: a reply that does not match is refused with 400.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from aiohttp import web

from birddog import Mail, Reply
from birddog.http.inbox import Inbox, aiohttp_handler


class ReplyStore:
    """Replies in a JSON-lines file, one per key.

    Args:
        path: the file; created on the first reply.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.keys: set[str] = set()
        if path.exists():
            with path.open(encoding="utf-8") as lines:
                self.keys = {json.loads(line)["key"] for line in lines if line.strip()}

    def add(self, reply: Reply) -> None:
        """Append ``reply`` and make it durable; a key already stored is skipped."""
        if reply.key in self.keys:
            return
        with self.path.open("a", encoding="utf-8") as out:
            out.write(reply.model_dump_json(by_alias=True) + "\n")
            out.flush()
            os.fsync(out.fileno())
        self.keys.add(reply.key)


def load_sent(path: Path | None) -> dict[str, Mail]:
    """The mails you sent, by key, from a JSON-lines file (none when ``path`` is None)."""
    if path is None:
        return {}
    with path.open(encoding="utf-8") as lines:
        mails = [Mail.model_validate_json(line) for line in lines if line.strip()]
    return {mail.key: mail for mail in mails}


def make_app(inbox: Inbox, store: ReplyStore, sent: dict[str, Mail]) -> web.Application:
    """The receiving application: every POST to ``/inbox`` is one delivered reply."""

    async def on_reply(reply: Reply) -> None:
        mail = sent.get(reply.in_reply_to)
        if mail is not None:
            inbox.check_against(reply, mail)  # raises ReplyMismatch: answered 400
        store.add(reply)  # durable before the handler acknowledges
        print(f"stored {reply.key}: {reply.reply.outcome.value}", flush=True)

    app = web.Application()
    app.router.add_post("/inbox", aiohttp_handler(inbox, on_reply))
    return app


def main() -> None:
    """Parse the arguments and serve until interrupted."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--secret", required=True, action="append", help="whsec_... (repeat)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--store", type=Path, default=Path("replies.jsonl"))
    parser.add_argument("--sent", type=Path, default=None, help="JSON lines of sent mails")
    args = parser.parse_args()
    inbox = Inbox(args.secret)  # two secrets while a route's secret rotates
    app = make_app(inbox, ReplyStore(args.store), load_sent(args.sent))
    web.run_app(app, host=args.host, port=args.port, print=None)


if __name__ == "__main__":
    main()
