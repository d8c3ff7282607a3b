"""What goes wrong when a command agent is started or run: one error each."""

from __future__ import annotations

from birddog.core.errors import BirdDogError

__all__ = ["AgentSetupRefused", "CommandFailed", "CommandNotFound", "OutputTooLarge"]


class CommandNotFound(BirdDogError):
    """The command cannot be run: no such program, or it is not executable."""


class AgentSetupRefused(BirdDogError):
    """An agent's environment, user or directory cannot be given as asked."""


class CommandFailed(BirdDogError):
    """The command exited with a non-zero status or was killed by a signal.

    Attributes:
        returncode: the exit status (negative: the signal that killed it).
        stderr_tail: the last bytes the command wrote to stderr.
    """

    def __init__(self, message: str, *, returncode: int, stderr_tail: bytes = b"") -> None:
        self.returncode = returncode
        self.stderr_tail = stderr_tail
        super().__init__(message)


class OutputTooLarge(CommandFailed):
    """The command wrote more to stdout than the limit; it was stopped."""
