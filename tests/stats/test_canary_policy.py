"""The canary policy (shadoweval.stats.canary.policy): the shipped default, field-named errors,
hash."""

from __future__ import annotations

import pytest

from shadoweval.errors import ConfigError
from shadoweval.stats.canary.policy import (
    DEFAULT_STEPS,
    CanaryPolicy,
    canary_policy_hash,
    canary_policy_to_yaml,
    latency_key_parts,
    load_canary_policy,
    parse_canary_policy_yaml,
)


def test_the_shipped_default_file_is_the_default_policy() -> None:
    policy = load_canary_policy(None)
    assert policy == CanaryPolicy(steps=DEFAULT_STEPS)
    assert policy.steps[-1].share == 1.0
    assert all(step.min_window_s >= 86400 for step in policy.steps[:-1])


def test_dump_loads_back_equal_with_the_same_hash() -> None:
    policy = load_canary_policy(None)
    again = parse_canary_policy_yaml(canary_policy_to_yaml(policy))
    assert again == policy
    assert canary_policy_hash(again) == canary_policy_hash(policy)


SHORT = """
allow_short_windows: {allow}
steps:
  - {{share: 0.5, min_window_s: 60}}
  - {{share: 1.0, min_window_s: 60}}
"""


def test_a_window_below_a_daily_cycle_needs_allow_short_windows() -> None:
    with pytest.raises(ConfigError, match=r"steps\[0\]\.min_window_s = 60.*below one daily cycle"):
        parse_canary_policy_yaml(SHORT.format(allow="false"))
    policy = parse_canary_policy_yaml(SHORT.format(allow="true"))
    assert [s.share for s in policy.steps] == [0.5, 1.0]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "allow_short_windows: true\nsteps:\n  - {share: 0.5, min_window_s: 60}\n"
            "  - {share: 0.2, min_window_s: 60}\n  - {share: 1.0, min_window_s: 60}\n",
            r"steps\[1\]\.share = 0\.2: shares must be strictly increasing",
        ),
        ("steps: []\nbogus: 1\n", "bogus"),
        ("steps:\n  - {share: 1.0, min_window_s: 60}\nsteps: []\n", "steps"),
    ],
)
def test_bad_policies_name_the_field(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_canary_policy_yaml(text)


def test_latency_keys() -> None:
    assert latency_key_parts("e2e_p95") == ("e2e_ms", 0.95)
    assert latency_key_parts("ttft_p99") == ("ttft_ms", 0.99)
    with pytest.raises(ValueError, match="tpot_p50"):
        latency_key_parts("tpot_p50")
