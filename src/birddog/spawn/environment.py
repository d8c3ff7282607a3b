"""What an agent's environment holds: an allow-list of the worker's, and its job's ids."""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Final

from birddog.core.jobs import AgentJobPayload
from birddog.spawn.errors import AgentSetupRefused

__all__ = ["AGENT_ENVIRONMENT", "agent_environment", "check_passed_names", "job_environment"]

AGENT_ENVIRONMENT: Final = ("PATH", "HOME", "LANG", "TZ")
"""The variables of the worker's environment an agent gets (and every ``LC_*``)."""

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _withheld(name: str) -> bool:
    """Whether a variable belongs to the worker: its database and its settings."""
    upper = name.upper()
    return upper == "DATABASE_URL" or upper.startswith(("PG", "BIRDDOG_"))


def check_passed_names(names: Collection[str]) -> list[str]:
    """Check the names of ``worker --env``: variables, none of them the worker's own.

    Args:
        names: the names, as given.

    Returns:
        The names.

    Raises:
        AgentSetupRefused: a name is not a variable name, or names the worker's
            credentials or settings (``DATABASE_URL``, ``PG*``, ``BIRDDOG_*``, in any
            case), which no agent is given.
    """
    for name in names:
        if not _NAME.fullmatch(name):
            raise AgentSetupRefused(f"--env {name[:200]!r}: not a variable name")
        if _withheld(name):
            raise AgentSetupRefused(
                f"--env {name}: the worker's database and settings (DATABASE_URL, PG*, "
                "BIRDDOG_*) are never passed to agents"
            )
    return list(names)


def agent_environment(
    environ: Mapping[str, str], *, passed: Collection[str] = (), home: str | None = None
) -> dict[str, str]:
    """The environment an agent gets: an allow-list of the worker's, never a copy of it.

    ``PATH``, ``HOME``, ``LANG``, ``TZ`` and ``LC_*`` (exactly these names), plus the
    variables named in ``passed``; whatever the worker's credentials and settings are
    called (``DATABASE_URL``, ``PG*``, ``BIRDDOG_*``, in any case) they are left out,
    even when passed.

    Args:
        environ: the worker's environment (``os.environ``).
        passed: more names to pass (``worker --env``).
        home: the agent's ``HOME`` (another user's), instead of the worker's.

    Returns:
        The variables.
    """
    wanted = set(AGENT_ENVIRONMENT) | set(passed)
    env = {
        name: value
        for name, value in environ.items()
        if (name in wanted or name.startswith("LC_")) and not _withheld(name)
    }
    if home is not None:
        env["HOME"] = home
    return env


def job_environment(payload: AgentJobPayload, job_id: str | None) -> dict[str, str]:
    """The ids a command agent finds in its environment for one job.

    Args:
        payload: the job's decoded payload.
        job_id: the job's id, when known.

    Returns:
        ``BIRDDOG_JOB_ID``, ``BIRDDOG_SESSION_ID``, ``BIRDDOG_COMMAND_ID`` and, for a job
        with mail, ``BIRDDOG_MAIL_KEY``, ``BIRDDOG_FROM_AGENT``, ``BIRDDOG_FROM_SESSION``.
    """
    ids = {"BIRDDOG_SESSION_ID": payload.session_id, "BIRDDOG_COMMAND_ID": payload.command_fact_id}
    if job_id is not None:
        ids["BIRDDOG_JOB_ID"] = job_id
    if payload.mail is not None:
        ids["BIRDDOG_MAIL_KEY"] = payload.mail.key
        ids["BIRDDOG_FROM_AGENT"] = payload.mail.from_.agent_id
        ids["BIRDDOG_FROM_SESSION"] = payload.mail.from_.session_id
    return ids
