"""The YAML reading shared by the gate and canary policy loaders
(shadoweval.stats.policy.yaml_loading)."""

from __future__ import annotations

import pytest

from shadoweval.errors import ConfigError
from shadoweval.stats.canary.policy import parse_canary_policy_yaml
from shadoweval.stats.policy import parse_policy_yaml
from shadoweval.stats.policy.yaml_loading import read_policy_yaml


@pytest.mark.parametrize("subject", ["gate policy", "canary policy"])
def test_a_repeated_key_names_the_subject_the_source_the_key_and_its_line(subject: str) -> None:
    with pytest.raises(ConfigError) as info:
        read_policy_yaml("a: 1\nb:\n  c: 2\n  c: 3\n", subject=subject, source="file p.yaml")
    assert str(info.value) == f"{subject} file p.yaml: duplicate key 'c' at line 4"
    assert (info.value.field, info.value.value) == ("c", "c")


def test_both_loaders_name_their_own_policy() -> None:
    with pytest.raises(ConfigError, match=r"^gate policy <policy>: duplicate key 'alpha'"):
        parse_policy_yaml("alpha: 0.02\nalpha: 0.03\n")
    with pytest.raises(ConfigError, match=r"^canary policy <canary policy>: duplicate key 'alpha'"):
        parse_canary_policy_yaml("alpha: 0.02\nalpha: 0.03\n")
    with pytest.raises(ConfigError, match=r"^canary policy <canary policy> is empty"):
        parse_canary_policy_yaml("# nothing\n")
    with pytest.raises(ConfigError, match=r"^gate policy <policy> is not valid YAML"):
        parse_policy_yaml("alpha: [0.1\n")


def test_yaml_1_2_exponents_are_floats_and_quoted_ones_stay_strings() -> None:
    data = read_policy_yaml("a: 5e-3\nb: 1E4\nc: '5e-3'\n", subject="gate policy", source="s")
    assert data == {"a": 0.005, "b": 10000.0, "c": "5e-3"}
