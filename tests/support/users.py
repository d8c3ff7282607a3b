"""OS users made for one test (root only) and removed after: agents run as them (``--user``)."""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
from collections.abc import Iterator

import pytest


@contextlib.contextmanager
def os_user(prefix: str = "bdagent") -> Iterator[str]:
    """A fresh OS user without a home or a login shell, removed on leaving.

    Skips the test where this process is not root (CI runs as root).

    Args:
        prefix: the start of its name (a random suffix follows).

    Yields:
        Its name.
    """
    if os.geteuid() != 0:
        pytest.skip("creating an OS user for --user needs root (CI runs as root)")
    name = f"{prefix}{secrets.token_hex(3)}"
    subprocess.run(  # noqa: S603 - fixed arguments, a test-made name
        ["/usr/sbin/useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
        check=True,
        capture_output=True,
    )
    try:
        yield name
    finally:
        subprocess.run(  # noqa: S603 - fixed arguments, a test-made name
            ["/usr/sbin/userdel", name], check=False, capture_output=True
        )
