"""Which pairs of one task type an export takes: the lowest N, or a seeded random N.

Both work on the ``(exchange_id, similarity)`` list that
:meth:`~shadoweval.storage.Repository.sample_ids` returns for one task type, in page order
(pairs without a similarity first by exchange id, then similarity ascending, then exchange
id).

* ``lowest``: the first N in that order. Without a similarity bound the pairs that have
  no similarity (an errored side) come first, because they match every filter that does
  not exclude them; analysts who want the *divergent* band set ``max_similarity`` (which
  also leaves out pairs without a similarity) — or filter on a flag.
* ``random``: ``numpy.random.default_rng(seed).choice`` over the ids **sorted by
  exchange id**, ``min(N, available)`` of them without replacement. Each task type draws
  with its own generator seeded with ``seed``, so a task type's sample depends only on
  the seed and its own matching pairs (not on which other task types were exported), and
  the same seed over the same data gives the same sample.

The chosen pairs are returned in page order in both cases.

An explicit restriction to a set of exchange ids (the request's ``exchange_ids``, e.g.
the pairs that changed and are not judged yet) is applied first, by
:func:`restrict_ids`: the order is drawn from the pairs that are left, so a seeded draw
over a restricted export depends only on the seed and the restricted pairs.
"""

from __future__ import annotations

from collections.abc import Sequence, Set

import numpy as np

from shadoweval.export.request import ExportOrder


def restrict_ids(
    ids: Sequence[tuple[str, float | None]], allowed: Set[str] | None
) -> list[tuple[str, float | None]]:
    """The pairs of ``ids`` whose exchange id is in ``allowed``, page order kept.

    Args:
        ids: ``(exchange_id, similarity)`` of every matching pair, in page order.
        allowed: the exchange ids to keep; ``None`` keeps every pair (no restriction).
            Ids in ``allowed`` that are not in ``ids`` are ignored.
    """
    if allowed is None:
        return list(ids)
    return [(exchange_id, similarity) for exchange_id, similarity in ids if exchange_id in allowed]


def choose_ids(
    ids: Sequence[tuple[str, float | None]],
    *,
    n: int,
    order: ExportOrder,
    seed: int | None,
) -> list[str]:
    """Exchange ids of the pairs exported from one task type, in page order.

    Args:
        ids: ``(exchange_id, similarity)`` of every matching pair, in page order.
        n: the most pairs to take (>= 1).
        order: ``lowest`` or ``random`` (see the module doc).
        seed: the seed of the random draw (required for ``random``).

    Raises:
        ValueError: ``n`` < 1, or ``random`` without a seed.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if order == "lowest":
        return [exchange_id for exchange_id, _ in ids[:n]]
    if seed is None:
        raise ValueError("a random draw needs a seed")
    population = sorted(exchange_id for exchange_id, _ in ids)
    size = min(n, len(population))
    if size == 0:
        return []
    positions = np.random.default_rng(seed).choice(len(population), size=size, replace=False)
    chosen = {population[int(i)] for i in positions}
    return [exchange_id for exchange_id, _ in ids if exchange_id in chosen]
