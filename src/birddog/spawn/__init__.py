"""Kill what you spawn: every child runs under a supervisor that ends it whole.

A timed-out call that stops listening but leaves the process it started running is an
orphan working at full effort for nobody, and a worker killed with ``SIGKILL`` cannot end
anything. So every process started here runs under :mod:`birddog.supervisor`, a small
script the worker's interpreter runs as the leader of a new process group: the kernel
tells it when the worker dies (Linux), it is the subreaper of everything the command
starts, and whenever the caller is done with the child (it finished, the caller was
cancelled by a timeout, a cancellation or a shutdown, anything raised, or the worker
died) the whole tree is ended: ``SIGTERM``, then ``SIGKILL`` after a grace period, even
what left the group with ``setsid`` or a double fork. On platforms without ``/proc``
and ``prctl`` (macOS) only the process group is reached; see SECURITY.md.

- :func:`process_group`: an async context manager around one supervised child.
- :func:`run_command`: run a program to completion with input, bounded output and the
  tail of its stderr.
- :func:`command_handler`: a worker handler that runs one process per job
  (``birddog worker --command``): mail content on stdin, ids in the environment, stdout
  the reply, a non-zero exit a failure with the tail of stderr as its diagnostic; in a
  fresh directory, with an allow-listed environment, optionally as another OS user.
- :func:`agent_environment`: the environment an agent gets (an allow-list, never the
  worker's credentials).

Python handlers that start agents use the first two::

    from birddog.spawn import agent_environment, run_command

    async def handle(payload: AgentJobPayload) -> str:
        done = await run_command(
            ["claude", "-p"],
            input=payload.mail.content.encode(),
            env=agent_environment(os.environ, passed=["ANTHROPIC_API_KEY"]),
        )
        return done.stdout.decode()       # cancelled by the worker: the group is killed

The package holds one concept a module: :mod:`~birddog.spawn.errors`,
:mod:`~birddog.spawn.environment` (the allow-list, the job's ids),
:mod:`~birddog.spawn.users` (``--user``), :mod:`~birddog.spawn.groups` (one supervised
process group), :mod:`~birddog.spawn.running` (:func:`run_command`),
:mod:`~birddog.spawn.command` (the command handler) and
:mod:`~birddog.spawn.leftovers` (turns whose worker is gone).
"""

from __future__ import annotations

from birddog.core.turns import DEFAULT_KILL_GRACE_S
from birddog.spawn.command import command_argv, command_handler, command_turn_handler
from birddog.spawn.environment import (
    AGENT_ENVIRONMENT,
    agent_environment,
    check_passed_names,
    job_environment,
)
from birddog.spawn.errors import AgentSetupRefused, CommandFailed, CommandNotFound, OutputTooLarge
from birddog.spawn.groups import ProcessGroup, process_group
from birddog.spawn.leftovers import end_leftover_turn, end_leftover_turns
from birddog.spawn.running import Completed, describe_exit, run_command
from birddog.spawn.users import Guarded, RunAs, check_guarded, run_as

__all__ = [
    "AGENT_ENVIRONMENT",
    "DEFAULT_KILL_GRACE_S",
    "AgentSetupRefused",
    "CommandFailed",
    "CommandNotFound",
    "Completed",
    "Guarded",
    "OutputTooLarge",
    "ProcessGroup",
    "RunAs",
    "agent_environment",
    "check_guarded",
    "check_passed_names",
    "command_argv",
    "command_handler",
    "command_turn_handler",
    "describe_exit",
    "end_leftover_turn",
    "end_leftover_turns",
    "job_environment",
    "process_group",
    "run_as",
    "run_command",
]
