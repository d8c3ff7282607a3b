"""A command agent that takes a batched turn: ``birddog worker --command ... --batch N``.

With ``--batch`` the worker starts this program once per turn, not once per mail: it
reads the turn's mails from stdin as JSON lines (``job_id``, ``key``, ``from``, ``kind``,
``content``) and answers each with one JSON line (``job_id``, ``content``, and optionally
``outcome`` and ``diagnostic``). A mail it does not answer settles ``failed``; a line that
is not such an answer fails the mails left unanswered, never a guessed answer.
"""

from __future__ import annotations

import json
import sys


def main() -> None:
    """Read the turn, answer every mail in it, and say how many came in one turn."""
    mails = [json.loads(line) for line in sys.stdin if line.strip()]
    reports = sum(1 for mail in mails if mail["kind"] in ("report", "receipt"))
    for mail in mails:
        if mail["kind"] in ("report", "receipt"):
            content = f"noted ({len(mails)} mails in this turn, {reports} of them reports)"
        else:
            content = f"on it: {mail['content']}"
        print(json.dumps({"job_id": mail["job_id"], "content": content}), flush=True)


if __name__ == "__main__":
    main()
