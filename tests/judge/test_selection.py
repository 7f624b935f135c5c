"""The judge budget: changed pairs only, proportional strata, already judged count, random order."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import pytest

from shadoweval.judge import allocate, select_pairs
from shadoweval.judge.selection import sample_order


@pytest.mark.parametrize(
    ("sizes", "total", "expected"),
    [
        ({0: 60, 1: 30, 2: 10}, 10, {0: 6, 1: 3, 2: 1}),
        ({0: 60, 1: 30, 2: 10}, 200, {0: 60, 1: 30, 2: 10}),  # clipped to what exists
        ({0: 97, 1: 2, 2: 1}, 10, {0: 8, 1: 1, 2: 1}),  # at least one per stratum
        ({0: 5, 1: 3, 2: 1, 3: 0}, 2, {0: 1, 1: 1, 2: 0, 3: 0}),  # fewer than strata
        ({0: 1, 1: 1, 2: 50}, 4, {0: 1, 1: 1, 2: 2}),
        ({}, 5, {}),
        ({0: 3}, 0, {0: 0}),
    ],
)
def test_allocate(sizes: dict[int, int], total: int, expected: dict[int, int]) -> None:
    got = allocate(sizes, total)
    assert got == expected
    assert sum(got.values()) == min(total, sum(sizes.values()))
    assert all(got[h] <= sizes[h] for h in sizes)


def test_allocation_is_proportional_up_to_rounding() -> None:
    rng = np.random.default_rng(3)
    for _ in range(200):
        sizes = {h: int(n) for h, n in enumerate(rng.integers(1, 300, size=5))}
        total = int(rng.integers(5, sum(sizes.values())))
        got = allocate(sizes, total)
        share = {h: total * n / sum(sizes.values()) for h, n in sizes.items()}
        assert all(abs(got[h] - share[h]) < 2 for h in sizes), (sizes, total, got)


def frame(n_chat: int = 40, n_code: int = 10) -> dict[str, Any]:
    ids = [f"ex-{i:04d}" for i in range(n_chat + n_code)]
    types = ["chat"] * n_chat + ["code"] * n_code
    changed = [i % 2 == 0 for i in range(n_chat + n_code)]  # every other pair changed
    stratum = [(i // 2) % 3 if c else -1 for i, c in enumerate(changed)]
    return {"exchange_ids": ids, "task_types": types, "changed": changed, "stratum": stratum}


def test_only_changed_pairs_are_selected_within_the_budget() -> None:
    data = frame()
    selection = select_pairs(run_id="r", already_judged=(), max_per_task_type=9, **data)
    chat = selection.task_types["chat"]
    assert (chat.pairs, chat.changed, chat.already_judged) == (40, 20, 0)
    assert len(chat.selected) == 9
    changed_ids = {e for e, c in zip(data["exchange_ids"], data["changed"], strict=True) if c}
    assert set(selection.exchange_ids) <= changed_ids
    code = selection.task_types["code"]
    assert code.changed == 5
    assert len(code.selected) == 5  # fewer changed pairs than the budget: all of them
    for exchange_id, h in selection.stratum_of.items():
        assert data["stratum"][data["exchange_ids"].index(exchange_id)] == h
    assert {h: s[2] for h, s in chat.strata.items()} == {0: 3, 1: 3, 2: 3}


def test_already_judged_pairs_count_against_the_budget_and_are_not_resent() -> None:
    data = frame()
    first = select_pairs(run_id="r", already_judged=(), max_per_task_type=6, **data)
    judged = set(first.exchange_ids)
    again = select_pairs(run_id="r", already_judged=judged, max_per_task_type=6, **data)
    assert again.exchange_ids == []
    assert again.task_types["chat"].already_judged == 6
    more = select_pairs(run_id="r", already_judged=judged, max_per_task_type=12, **data)
    assert len(more.task_types["chat"].selected) == 6
    assert not judged & set(more.exchange_ids)


def test_the_order_within_a_stratum_is_sha256_of_run_and_exchange() -> None:
    data = frame(n_chat=40, n_code=0)
    data["stratum"] = [0 if c else -1 for c in data["changed"]]
    selection = select_pairs(run_id="run-x", already_judged=(), max_per_task_type=5, **data)
    changed_ids = [e for e, c in zip(data["exchange_ids"], data["changed"], strict=True) if c]
    key = lambda e: hashlib.sha256(f"run-x\x00{e}".encode()).hexdigest()  # noqa: E731
    assert list(selection.exchange_ids) == sorted(changed_ids, key=key)[:5]
    assert sample_order("run-x", "ex-0000") == key("ex-0000")
    other = select_pairs(run_id="run-y", already_judged=(), max_per_task_type=5, **data)
    assert other.exchange_ids != selection.exchange_ids


def test_ineligible_pairs_count_in_strata_but_are_never_sent() -> None:
    data = frame(n_chat=10, n_code=0)
    eligible = [False] * 10
    selection = select_pairs(
        run_id="r", already_judged=(), max_per_task_type=5, eligible=eligible, **data
    )
    assert selection.exchange_ids == []
    assert selection.task_types["chat"].changed == 5


def test_per_task_type_budgets_and_bad_input() -> None:
    data = frame()
    selection = select_pairs(run_id="r", already_judged=(), max_per_task_type={"chat": 2}, **data)
    assert len(selection.task_types["chat"].selected) == 2
    assert selection.task_types["code"].selected == ()
    with pytest.raises(ValueError, match="exchange_ids has 50 entries"):
        select_pairs(
            run_id="r",
            exchange_ids=data["exchange_ids"],
            task_types=data["task_types"][:3],
            changed=data["changed"],
            stratum=data["stratum"],
            already_judged=(),
            max_per_task_type=3,
        )
    with pytest.raises(ValueError, match="must be >= 0"):
        select_pairs(run_id="r", already_judged=(), max_per_task_type=-1, **data)


def test_a_stratum_that_fills_after_the_budget_is_spent_gets_one_pair() -> None:
    """The top-up: earlier calls spent the budget while stratum 2 was empty; it gets one pair
    anyway, so no changed stratum stays unjudged (at most one extra per stratum)."""
    data = frame(n_chat=60, n_code=0)
    early = {
        **data,
        "changed": [c and s != 2 for c, s in zip(data["changed"], data["stratum"], strict=True)],
    }
    first = select_pairs(run_id="r", already_judged=(), max_per_task_type=6, **early)
    judged = set(first.exchange_ids)
    assert len(judged) == 6
    assert all(first.stratum_of[e] != 2 for e in judged)
    later = select_pairs(run_id="r", already_judged=judged, max_per_task_type=6, **data)
    chat = later.task_types["chat"]
    assert len(chat.selected) == 1
    assert later.stratum_of[chat.selected[0]] == 2
    assert chat.strata[2][2] == 1
    again = select_pairs(
        run_id="r", already_judged=judged | set(chat.selected), max_per_task_type=6, **data
    )
    assert again.exchange_ids == []  # the stratum is judged now: nothing more over budget
