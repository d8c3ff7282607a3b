"""The composition root: the one place that names concrete adapters, for every process.

It wires and never runs: no loop, no signal, no output. Running a process lives in
:mod:`birddog.processes` (one module per process). Three modules, all re-exported here:
:mod:`~birddog.bootstrap.adapters` (the adapters over one database),
:mod:`~birddog.bootstrap.builds` (what each process runs, over a adapters) and
:mod:`~birddog.bootstrap.clients` (sends, asks and the spool over a pool, for callers
without a adapters).

- :func:`open_adapters` opens the adapters over one database (pool, outbox, wake, routes,
  job store, reports, HTTP transport, mail room); every command, process, the probe and
  the demo take theirs from it. :func:`open_demo_adapters` does so over a database of the
  demo's own.
- ``build_*`` wire what one process runs over open adapters: :func:`build_daemon`,
  :func:`build_worker`, :func:`build_console`, and the listeners, alerts and daemon row
  around them.
- :func:`open_spool` is the local spool of the settings (no database needed);
  :func:`open_sender` wires the library's :class:`~birddog.MailService` over a pool.
- :func:`migrate_schema` upgrades the schema of the configured database.
- Where the database is (:func:`database`, :func:`running_database`,
  :func:`psql_session`) is the Postgres adapter's to say (:mod:`birddog.postgres.locate`),
  and so is the server's reason for a refused statement (:func:`refusal_reason`); they
  are named here so the commands need not know the adapter.
"""

from __future__ import annotations

from birddog.bootstrap.adapters import (
    HEARTBEAT_S,
    Adapters,
    migrate_schema,
    open_adapters,
    open_demo_adapters,
)
from birddog.bootstrap.builds import (
    A2A_POOL_SIZE,
    MCP_POOL_SIZE,
    a2a_services,
    build_agent_tools,
    build_alerts,
    build_console,
    build_daemon,
    build_daemon_row,
    build_jobs_listener,
    build_live_announcer,
    build_wake_listener,
    build_worker,
    token_book,
)
from birddog.bootstrap.clients import CLOCK, open_asking, open_sender, open_spool
from birddog.postgres.locate import (
    Announce,
    StoppedBeforeStart,
    database,
    psql_session,
    running_database,
)
from birddog.postgres.pool import refusal_reason, transient_reason

__all__ = [
    "A2A_POOL_SIZE",
    "CLOCK",
    "HEARTBEAT_S",
    "MCP_POOL_SIZE",
    "Adapters",
    "Announce",
    "StoppedBeforeStart",
    "a2a_services",
    "build_agent_tools",
    "build_alerts",
    "build_console",
    "build_daemon",
    "build_daemon_row",
    "build_jobs_listener",
    "build_live_announcer",
    "build_wake_listener",
    "build_worker",
    "database",
    "migrate_schema",
    "open_adapters",
    "open_asking",
    "open_demo_adapters",
    "open_sender",
    "open_spool",
    "psql_session",
    "refusal_reason",
    "running_database",
    "token_book",
    "transient_reason",
]
