"""The pod shutdown budget: the documented formula, rounding, and named refusals."""

from __future__ import annotations

import math

import pytest

from shadoweval.drain import drain_budget
from shadoweval.errors import ConfigError


def test_the_formula_of_deploy_k8s_readme() -> None:
    budget = drain_budget(ttft_p99_ms=500.0, tpot_p99_ms=40.0, max_tokens=1000)
    assert budget.stream_bound_s == pytest.approx(40.5)
    assert budget.sidecar_grace_period_s == 41
    assert budget.sidecar_pre_stop_s == 5
    assert budget.model_pre_stop_s == 46
    assert budget.termination_grace_period_s == math.ceil(5 + 40.5 + 15)


def test_an_exact_bound_is_not_rounded_up() -> None:
    budget = drain_budget(
        ttft_p99_ms=1000.0, tpot_p99_ms=10.0, max_tokens=100, endpoint_drain_s=0,
        flush_deadline_s=0,
    )  # fmt: skip
    assert budget.sidecar_grace_period_s == 2
    assert budget.termination_grace_period_s == 2


@pytest.mark.parametrize(
    ("field", "kwargs"),
    [
        ("ttft_p99_ms", {"ttft_p99_ms": 0.0}),
        ("tpot_p99_ms", {"tpot_p99_ms": float("nan")}),
        ("max_tokens", {"max_tokens": 0}),
        ("endpoint_drain_s", {"endpoint_drain_s": -1}),
        ("flush_deadline_s", {"flush_deadline_s": float("inf")}),
    ],
)
def test_a_bad_value_names_its_argument(field: str, kwargs: dict[str, float]) -> None:
    arguments: dict[str, float] = {"ttft_p99_ms": 400.0, "tpot_p99_ms": 30.0, "max_tokens": 512}
    arguments.update(kwargs)
    with pytest.raises(ConfigError, match=field) as raised:
        drain_budget(**arguments)  # type: ignore[arg-type]
    assert raised.value.field == field
