"""A warm ``birddog`` for a client that starts its server itself: ``python -S THIS SOCKET ARGS``.

The MCP SDK's ``stdio_client`` starts the server as a process of its own and talks to it
over that process's standard streams. This script is that process: it asks the test
worker's zygote (:mod:`tests.support.zygote`, listening on ``SOCKET``) to fork
``birddog ARGS`` with this process's standard streams, environment and working directory,
then stands for it: a SIGTERM or SIGINT it gets goes to the command, and it exits with the
command's status. The command is the same fork every other command of the suite is, only
its start (a few milliseconds, not the ``mcp`` package's import) differs.

It imports only the standard library and runs without ``site`` (``-S``), so it starts in
a few milliseconds; it is run as a script, never imported.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import sys


def main() -> int:
    """Fork the command through the zygote, forward signals, return its exit status."""
    path, args = sys.argv[1], sys.argv[2:]
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(path)
    request = {"args": args, "env": dict(os.environ), "cwd": os.getcwd(), "argv0": "birddog"}
    data = json.dumps(request).encode()
    socket.send_fds(conn, [struct.pack("!I", len(data)) + data], [0, 1, 2])
    # The command holds the streams now: this process keeps none of them open, so the
    # client sees the end of the command's output when the command ends.
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1):
        os.dup2(devnull, fd)

    def forward(signum: int, _frame: object) -> None:
        conn.sendall(f"{signum}\n".encode())

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    received = b""
    while True:
        try:
            more = conn.recv(64)
        except InterruptedError:
            continue
        if not more:  # the zygote itself went away
            return 1
        received += more
        *lines, received = received.split(b"\n")  # whole lines; the rest waits for more
        for line in lines:
            if line.startswith(b"exit "):
                code = int(line.split()[1])
                return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main())
