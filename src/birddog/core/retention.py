"""What BirdDog keeps and for how long: nothing is deleted unless a retention is set."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """How long each kind of row is kept; None keeps it for ever.

    Attributes:
        receipts_s: receipts delivered longer ago than this are deleted.
        jobs_settled_s: jobs settled longer ago than this are deleted (a replayed enqueue
            of a deleted job id is then a new job: keep jobs as long as senders may retry).
        dead_s: dead letters that died longer ago than this are deleted.
        mailbox_read_s: mailbox replies read longer ago than this are deleted (their
            receipts stay).
    """

    receipts_s: float | None = None
    jobs_settled_s: float | None = None
    dead_s: float | None = None
    mailbox_read_s: float | None = None

    @property
    def empty(self) -> bool:
        """Nothing is to be pruned."""
        return all(
            value is None
            for value in (self.receipts_s, self.jobs_settled_s, self.dead_s, self.mailbox_read_s)
        )


@dataclass(frozen=True, slots=True)
class PruneReport:
    """How many rows one prune deleted, by kind."""

    receipts: int = 0
    jobs: int = 0
    dead_letters: int = 0
    mailbox: int = 0

    @property
    def total(self) -> int:
        """Rows deleted in all."""
        return self.receipts + self.jobs + self.dead_letters + self.mailbox
