"""A claim that fills what it asks for, and an acknowledgement without a WAL flush.

``birddog.claim`` (revision 0012's) runs up to five passes over the queue heads, but ended
after the first pass that took anything: a claim for 4 whose first pass took 3 (the
fourth head held by another transaction) returned 3 while other queues had free heads.
A short answer therefore did not mean "nothing more to take", and a worker had to claim
again at once after every claim that took something (two statements per job with one
asker). Now the passes go on until ``p_limit`` jobs are taken or no candidate is left,
each pass asking only for what is still missing; a claim that took fewer than it asked
for found nothing more it could take (with ``queue_concurrency`` above 1, a queue it took
from may hold a next job for a next statement). The extra pass is one index scan of
``birddog.queue_heads`` inside the call, no round trip.

``birddog.ack`` (mark mailbox replies read) commits without waiting for the WAL flush:
``PERFORM set_config('synchronous_commit', 'off', true)`` in its body, which lasts until
the caller's transaction ends (a ``SET`` clause on the function would be undone when the
function returns, before the commit). Why that is safe: an acknowledgement lost in a
server crash leaves the reply listed as unread, which is what happens today when a
reader dies between reading and acknowledging (``Asking`` and the MCP tools already
treat an ack that did not happen as harmless); the reply itself was stored by the
daemon's flushed commit. Ordering holds: any later commit that waits for the flush
writes all earlier WAL, this transaction's included, so an acknowledgement is never
durable after something that came after it. The caller's whole transaction commits
that way, so ``ack`` is only ever called alone (``PostgresMailbox.ack``).

Not done here, and why: ``birddog.claim`` keeps its flush. A worker starts the handler
as soon as the claim answers; a claim lost in a server crash would put the job back in
its queue while its first turn still runs (the heartbeat notices only at its next beat,
up to a third of the lease later), so a second worker could start a second turn of the
same session, and a job without a recovery budget could run twice. Both are guarantees
(one turn per session; no rerun without a budget) that a flushed claim keeps. The same
holds for the daemon's outbox claims: a lost lease after a short crash turns an accepted
post into a duplicate, which the fault run rules out (every duplicate was still claimed
right after the crash).

Grants are kept: ``CREATE OR REPLACE`` keeps the functions' owner, ``SECURITY DEFINER``,
pinned ``search_path`` and ``EXECUTE`` grants.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-02
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from alembic import op

revision: str = "0017"
down_revision: str | Sequence[str] | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _revision(filename: str) -> ModuleType:
    """An earlier revision's module, read from this folder (the text it created)."""
    path = Path(__file__).with_name(filename)
    spec = importlib.util.spec_from_file_location(f"birddog_revision_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot read revision {filename}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _patched(body: str, changes: Sequence[tuple[str, str, int]]) -> str:
    """``body`` as ``CREATE OR REPLACE`` with each (old, new, times) change, found exactly."""
    for old, new, times in changes:
        if body.count(old) != times:
            raise RuntimeError(f"the function is not as revision 0017 expects: {old!r}")
        body = body.replace(old, new)
    return body.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)


_PASSES = (
    "    -- A few passes: a candidate whose head cannot be taken (another transaction holds"
    " it, a\n    -- head row out of date) is refreshed and left out of the next pass.\n"
)
_LIMIT = "                LIMIT p_limit\n                FOR UPDATE SKIP LOCKED"

CLAIM_CHANGES = (
    ("    v_taken integer;\n", "    v_taken integer;\n    v_total integer := 0;\n", 1),
    (
        _PASSES,
        _PASSES
        + "    -- The passes go on until p_limit jobs are taken or no candidate is left, so a\n"
        "    -- claim that takes fewer than it asks for found no other queue to take from.\n",
        1,
    ),
    (_LIMIT, "                LIMIT p_limit - v_total\n                FOR UPDATE SKIP LOCKED", 2),
    (
        "        PERFORM birddog._queue_heads_refresh(v_queues);\n        EXIT WHEN v_taken > 0;\n",
        "        PERFORM birddog._queue_heads_refresh(v_queues);\n"
        "        v_total := v_total + v_taken;\n"
        "        EXIT WHEN v_total >= p_limit;\n",
        1,
    ),
)

ACK_CHANGES = (
    (
        "BEGIN\n    -- Mark mailbox replies read;",
        "BEGIN\n"
        "    -- Lost in a server crash, an acknowledgement leaves the reply unread (revision\n"
        "    -- 0017): no WAL flush for it, until the caller's transaction ends.\n"
        "    PERFORM set_config('synchronous_commit', 'off', true);\n"
        "    -- Mark mailbox replies read;",
        1,
    ),
)


def _bodies() -> tuple[str, str]:
    """Revision 0012's claim and revision 0007's ack, as they were created."""
    claim = _revision("0012_jobs_model.py").CLAIM
    ack = _revision("0007_write_functions.py").FUNCTIONS["ack(text[],timestamptz)"]
    return claim, ack


def upgrade() -> None:
    claim, ack = _bodies()
    op.execute(_patched(claim, CLAIM_CHANGES))
    op.execute(_patched(ack, ACK_CHANGES))


def downgrade() -> None:
    claim, ack = _bodies()
    op.execute(_patched(claim, ()))
    op.execute(_patched(ack, ()))
