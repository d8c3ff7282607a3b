"""Batched delivery: several replies to one recipient in one signed POST, acknowledged per key.

A route may opt in (``birddog route add AGENT URL --batch N``). Then the drain posts up to
``N`` due replies for that recipient at once:

- the body is ``{"replies": [<reply>, ...]}``, each reply exactly as a single post carries
  it (:func:`batch_body`);
- one Standard Webhooks signature covers the body; ``webhook-id`` is ``batch:`` and a hash
  of the sorted keys (:func:`batch_id`), the same for the same set of replies, so a
  retried batch keeps its id;
- the recipient answers ``{"accepted": ["outbox:...:reply:0", ...]}`` with the keys it
  took, or ``{"accepted": true}`` for all of them (:func:`batch_results`); a key it did
  not acknowledge is a failure of that reply alone; an answer that is no acceptance
  (a failure, ``429``/``503`` with ``Retry-After``, ``410``) applies to every reply of the
  batch.

Pure: the standard library only.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from birddog.core.delivery import Accepted, DeliveryResult, Failed

BATCH_ID_PREFIX = "batch:"
"""Every batch's ``webhook-id`` starts with this; a single reply's is its key."""

NOT_IN_BATCH_ACK = "the recipient did not acknowledge this reply in its batch's answer"
"""Why a reply of a batch failed when the recipient took others but not it."""


def batch_id(keys: Sequence[str]) -> str:
    """The ``webhook-id`` of a batch: ``batch:`` and the SHA-256 of its sorted keys.

    The same set of replies always gets the same id, whatever their order, so a recipient
    can recognise a retried batch; any other set gets another id.

    Args:
        keys: the reply keys in the batch.

    Returns:
        ``batch:<64 hex digits>``.
    """
    digest = hashlib.sha256("\n".join(sorted(keys)).encode()).hexdigest()
    return BATCH_ID_PREFIX + digest


def batch_body(bodies: Sequence[bytes]) -> bytes:
    """The JSON body of a batch: ``{"replies": [...]}`` around each reply's own JSON.

    Args:
        bodies: each reply's JSON, exactly as a single post would carry it.

    Returns:
        The body, UTF-8 JSON.
    """
    return b'{"replies":[' + b",".join(bodies) + b"]}"


def batch_results(
    keys: Sequence[str], accepted: object, *, status: int | None, head: str
) -> list[DeliveryResult]:
    """What a 2xx answer's ``accepted`` value means for each reply of a batch.

    Args:
        keys: the batch's reply keys, in the order posted.
        accepted: the answer's ``accepted`` value: ``true`` takes every reply, a list of
            keys takes those (keys it names that are not in the batch are ignored);
            anything else takes none.
        status: the answer's HTTP status.
        head: the answer's status line, for the failure reason (``HTTP 200 OK``).

    Returns:
        One result per key, in order: :class:`Accepted` for each reply taken,
        :class:`Failed` for the others.
    """
    if accepted is True:
        return [Accepted(status)] * len(keys)
    if isinstance(accepted, list) and all(isinstance(item, str) for item in accepted):
        taken = set(accepted)
        missing = Failed(NOT_IN_BATCH_ACK, status)
        return [Accepted(status) if key in taken else missing for key in keys]
    failed = Failed(f'{head} without "accepted": true or a list of the keys taken', status)
    return [failed] * len(keys)


def spread(result: DeliveryResult, count: int) -> list[DeliveryResult]:
    """One answer that is no acceptance, applied to every reply of a batch.

    A failure, a deferral (``Retry-After``: the whole batch moves, without a strike) or a
    rejection (``410 Gone``) concerns the recipient, not one reply.

    Args:
        result: what the answer came to.
        count: the replies in the batch.

    Returns:
        ``result`` once per reply.
    """
    return [result] * count
