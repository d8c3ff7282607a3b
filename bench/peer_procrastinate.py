"""Procrastinate's side of ``bench peer`` as a process: ``python -m bench.peer_procrastinate``.

Its commands (``load``, ``worker``) are in ``bench/peer_app.py``, which holds the app:
an app defined in ``__main__`` would be registered twice (once as ``__main__``, once
when its module is imported by name), so this module only starts it.
"""

from __future__ import annotations

import sys

from bench.peer_app import main

if __name__ == "__main__":
    main(sys.argv[1:])
