"""Choosing N pairs of a task type: the lowest N, or a seeded draw without replacement."""

from __future__ import annotations

import numpy as np
import pytest

from shadoweval.export.selection import choose_ids, restrict_ids

# page order: no similarity first (by id), then by (similarity, id)
IDS: list[tuple[str, float | None]] = [
    ("e07", None),
    ("e11", None),
    ("e03", -0.2),
    ("e01", 0.1),
    ("e09", 0.1),
    ("e02", 0.4),
    ("e10", 0.5),
    ("e05", 0.8),
    ("e04", 0.9),
    ("e08", 0.95),
    ("e06", 1.0),
]


def test_lowest_takes_the_first_n_in_page_order() -> None:
    assert choose_ids(IDS, n=4, order="lowest", seed=None) == ["e07", "e11", "e03", "e01"]
    assert choose_ids(IDS, n=100, order="lowest", seed=None) == [i for i, _ in IDS]
    assert choose_ids([], n=3, order="lowest", seed=None) == []


def test_random_is_numpy_default_rng_choice_over_ids_sorted_by_exchange_id() -> None:
    chosen = choose_ids(IDS, n=4, order="random", seed=42)
    population = sorted(i for i, _ in IDS)
    expected = set(np.random.default_rng(42).choice(population, size=4, replace=False))
    assert set(chosen) == expected
    # returned in page order
    page = [i for i, _ in IDS]
    assert chosen == sorted(chosen, key=page.index)


def test_random_is_reproducible_and_does_not_depend_on_the_input_order() -> None:
    shuffled = list(reversed(IDS))
    first = choose_ids(IDS, n=5, order="random", seed=7)
    assert set(choose_ids(shuffled, n=5, order="random", seed=7)) == set(first)
    assert choose_ids(IDS, n=5, order="random", seed=7) == first
    draws = {tuple(choose_ids(IDS, n=5, order="random", seed=s)) for s in range(20)}
    assert len(draws) > 10  # the seed matters


def test_random_takes_all_when_fewer_are_available_without_repeats() -> None:
    chosen = choose_ids(IDS, n=50, order="random", seed=1)
    assert sorted(chosen) == sorted(i for i, _ in IDS)
    assert choose_ids([], n=5, order="random", seed=1) == []


def test_bad_arguments_raise() -> None:
    with pytest.raises(ValueError, match="n must be >= 1"):
        choose_ids(IDS, n=0, order="lowest", seed=None)
    with pytest.raises(ValueError, match="needs a seed"):
        choose_ids(IDS, n=2, order="random", seed=None)


def test_restrict_ids_keeps_the_allowed_pairs_in_page_order() -> None:
    allowed = {"e06", "e11", "e01", "e99"}  # e99 is not among the pairs: ignored
    assert restrict_ids(IDS, allowed) == [("e11", None), ("e01", 0.1), ("e06", 1.0)]
    assert restrict_ids(IDS, None) == IDS
    assert restrict_ids(IDS, frozenset()) == []
    # the draw runs over what is left: lowest N of the restricted pairs
    kept = restrict_ids(IDS, allowed)
    assert choose_ids(kept, n=2, order="lowest", seed=None) == ["e11", "e01"]
    assert set(choose_ids(kept, n=2, order="random", seed=3)) <= allowed
