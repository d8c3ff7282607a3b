"""The local spool in a SQLite file: mail accepted while the database is away, on disk.

:class:`SqliteSpool` (asynchronous, :mod:`~birddog.sqlite.spool`) runs each call of
:class:`SpoolFile` (the waiting mail, :mod:`~birddog.sqlite.file`) in a worker thread; the
file is made of its database (connections, pragmas, lock and status,
:mod:`~birddog.sqlite.database`) and its quarantine (:mod:`~birddog.sqlite.quarantine`).
The forwarder that moves the rows into PostgreSQL is the application's
(:mod:`birddog.service.forwarding`).
"""

from birddog.sqlite.file import SpoolFile
from birddog.sqlite.spool import SqliteSpool

__all__ = ["SpoolFile", "SqliteSpool"]
