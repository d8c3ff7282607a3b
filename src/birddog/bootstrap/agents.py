"""What the worker keeps from the agents it runs as another user (``worker --user``)."""

from __future__ import annotations

from birddog.postgres.locate import data_dir
from birddog.settings import Settings
from birddog.spawn import Guarded

__all__ = ["guarded_paths"]


def guarded_paths(settings: Settings) -> list[Guarded]:
    """The paths an agent's user may neither own nor write, for these settings.

    The embedded server's data directory (its ``pgpass``, its server's files), the spool
    and the spool's directory. BirdDog reads ``BIRDDOG_SECRET_KEY`` from the environment
    only, which another user cannot read from a process of root's; a file it came from
    is the deployment's to keep (``EnvironmentFile=``, mode 0600).

    Args:
        settings: where the data directory and the spool are.

    Returns:
        The guarded paths (those that do not exist are skipped when judged).
    """
    spool = settings.spool_location()
    return [
        Guarded(data_dir(settings).path, "the embedded server's data directory"),
        Guarded(spool, "the spool"),
        Guarded(spool.parent, "the spool's directory"),
    ]
