"""The agent the ``turns`` benchmark runs: ``python bench/turn_agent.py SPAWNS [--lines]``.

It takes ``START_S`` to start (an agent's process and context are what a turn costs),
appends its pid to the file ``SPAWNS`` (one line per spawn), then answers: with
``--lines`` (``worker --batch N``) each JSON-line mail of the turn with one JSON line;
without, the one mail's content on stdin with its text.
"""

from __future__ import annotations

import json
import os
import sys
import time

START_S = 0.3
"""What starting the agent costs (a process, a context, a model's first token)."""


def main() -> None:
    """Start slowly, count the spawn, answer the turn."""
    time.sleep(START_S)
    with open(sys.argv[1], "a", encoding="utf-8") as spawns:
        spawns.write(f"{os.getpid()}\n")
    if "--lines" in sys.argv[2:]:
        for line in sys.stdin:
            if line.strip():
                mail = json.loads(line)
                print(json.dumps({"job_id": mail["job_id"], "content": "seen"}), flush=True)
    else:
        sys.stdin.read()
        print("seen")


if __name__ == "__main__":
    main()
