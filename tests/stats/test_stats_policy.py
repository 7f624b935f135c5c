"""Gate policy: defaults, validation errors naming field and value, overrides, hashing."""

from __future__ import annotations

from pathlib import Path

import pytest

from shadoweval.errors import ConfigError
from shadoweval.records import POOLED
from shadoweval.stats.policy import (
    DEFAULT_POLICY_FILE,
    GatePolicy,
    effective,
    load_policy,
    parse_policy,
    policy_hash,
    policy_to_yaml,
)

DEFAULT_YAML = Path(__file__).resolve().parents[2] / "stats" / "default_policy.yaml"


def test_default_policy_file_is_shipped_in_the_package() -> None:
    assert DEFAULT_POLICY_FILE.resolve() == DEFAULT_YAML


def test_default_policy_file_equals_the_defaults() -> None:
    policy = load_policy(DEFAULT_YAML)
    assert policy == GatePolicy()
    assert policy_hash(policy) == policy_hash(GatePolicy())


def test_default_policy_file_writes_every_field_out() -> None:
    text = DEFAULT_YAML.read_text(encoding="utf-8")
    for name in GatePolicy.model_fields:
        assert f"\n{name}:" in text, name
    blocks = (
        "sequential",
        "validity",
        "error_rate",
        "infra_error_rate",
        "format_parse",
        "similarity",
        "latency",
        "output_tokens",
    )
    for block in blocks:
        for name in type(getattr(GatePolicy(), block)).model_fields:
            assert f"  {name}:" in text, f"{block}.{name}"


def test_documented_defaults() -> None:
    p = GatePolicy()
    assert (p.version, p.alpha, p.alpha_harm) == (1, 0.025, 0.01)
    assert (p.min_pairs_per_task_type, p.min_pairs_pooled) == (50, 100)
    assert (p.min_traffic_share, p.min_coverage) == (0.05, 0.9)
    assert (p.error_rate.margin, p.error_rate.critical) == (0.01, True)
    assert (p.infra_error_rate.margin, p.infra_error_rate.critical) == (0.02, False)
    assert (p.format_parse.margin, p.format_parse.success_flag) == (0.01, "fence_stripped")
    sim = p.similarity
    assert (sim.max_mean_divergence, sim.noise_ratio, sim.noise_margin) == (0.35, 0.25, 0.01)
    assert (sim.tail_quantile, sim.tail_seed) == (0.95, 20240601)
    lat = p.latency
    assert lat.metrics == ("e2e_ms", "ttft_ms", "ttfc_ms")
    assert (lat.p50_ratio_max, lat.p95_ratio_max, lat.p99_ratio_max) == (1.1, 1.2, 1.3)
    assert (lat.min_pairs_p95, lat.min_tail_observations) == (100, 50)
    assert (p.output_tokens.enabled, p.output_tokens.ratio_max) == (True, 1.2)
    seq = p.sequential
    assert (seq.first_checkpoint, seq.factor, seq.n_max, seq.n_star) == (200, 2.0, None, None)
    assert (seq.spending, seq.harm_spending) == ("obf", "pocock")
    assert (p.power, p.validity.mix_alpha) == (0.8, 0.001)


def test_negative_margin_names_field_and_value() -> None:
    with pytest.raises(ConfigError) as info:
        parse_policy({"error_rate": {"margin": -0.01}})
    assert info.value.field == "error_rate.margin"
    assert info.value.value == -0.01
    assert str(info.value).startswith("policy field error_rate.margin = -0.01: must be > 0")


@pytest.mark.parametrize(
    ("mapping", "field"),
    [
        ({"error_rate": {"margin": 0}}, "error_rate.margin"),
        ({"format_parse": {"margin": 0.0}}, "format_parse.margin"),
        ({"similarity": {"max_mean_divergence": 0}}, "similarity.max_mean_divergence"),
        ({"alpha": 0.5}, "alpha"),
        ({"alpha_harm": 0}, "alpha_harm"),
        ({"latency": {"p95_ratio_max": 1.0}}, "latency.p95_ratio_max"),
        ({"latency": {"p50_ratio_max": 0.9}}, "latency.p50_ratio_max"),
        ({"latency": {"p99_ratio_max": 1}}, "latency.p99_ratio_max"),
        ({"latency": {"min_tail_observations": 0}}, "latency.min_tail_observations"),
        ({"similarity": {"noise_margin": 0}}, "similarity.noise_margin"),
        ({"similarity": {"noise_ratio": -0.1}}, "similarity.noise_ratio"),
        ({"similarity": {"tail_quantile": 0.5}}, "similarity.tail_quantile"),
        ({"output_tokens": {"ratio_max": 1.0}}, "output_tokens.ratio_max"),
        ({"output_tokens": {"enabled": "yes"}}, "output_tokens.enabled"),
        ({"sequential": {"factor": 1}}, "sequential.factor"),
        ({"sequential": {"first_checkpoint": 1}}, "sequential.first_checkpoint"),
        ({"sequential": {"n_max": 100}}, "sequential"),
        ({"sequential": {"spending": "linear"}}, "sequential.spending"),
        ({"validity": {"mix_alpha": 0}}, "validity.mix_alpha"),
        ({"power": 0.5}, "power"),
        ({"latency": {"metrics": ["e2e_ms", "tpot_ms"]}}, "latency.metrics.1"),
        ({"latency": {"metrics": ["e2e_ms", "e2e_ms"]}}, "latency.metrics"),
        ({"format_parse": {"success_flag": "lenient"}}, "format_parse.success_flag"),
        ({"error_rate": {"margin": True}}, "error_rate.margin"),
        ({"error_rate": {"margin": float("inf")}}, "error_rate.margin"),
        ({"error_rate": {"critical": "maybe"}}, "error_rate.critical"),
        ({"min_pairs_pooled": 10.5}, "min_pairs_pooled"),
        ({"min_coverage": 0}, "min_coverage"),
        ({"version": 2}, "version"),
        (
            {"task_types": {"code": {"error_rate": {"margin": -1}}}},
            "task_types.code.error_rate.margin",
        ),
        ({"task_types": {"code": 3}}, "task_types.code"),
        ({"infra_error_rate": {"margin": 0}}, "infra_error_rate.margin"),
        ({"infra_error_rate": {"critical": True}}, "infra_error_rate.critical"),
        (
            {"task_types": {"code": {"infra_error_rate": {"critical": True}}}},
            "task_types.code.infra_error_rate.critical",
        ),
    ],
)
def test_invalid_values_name_their_field(mapping: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_policy(mapping)
    assert info.value.field == field
    assert f"policy field {field} = " in str(info.value)


def test_unknown_keys_are_rejected_with_their_name() -> None:
    with pytest.raises(ConfigError) as info:
        parse_policy({"error_rate": {"marign": 0.01}})
    assert info.value.field == "error_rate.marign"
    assert "unknown field" in str(info.value)
    assert "allowed: margin, critical" in str(info.value)
    with pytest.raises(ConfigError) as info:
        parse_policy({"alpah": 0.05})
    assert info.value.field == "alpah"
    with pytest.raises(ConfigError) as info:
        parse_policy({"task_types": {"code": {"min_pair": 5}}})
    assert info.value.field == "task_types.code.min_pair"


def test_reserved_task_type_name() -> None:
    with pytest.raises(ConfigError, match="reserved"):
        parse_policy({"task_types": {POOLED: {}}})


def test_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError, match="not found") as info:
        load_policy(missing)
    assert info.value.value == str(missing)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("", "empty"),
        ("alpha: [0.1\n", "not valid YAML"),
        ("- 1\n- 2\n", "must be a mapping"),
        ("alpha: 0.02\nalpha: 0.03\n", "duplicate key 'alpha'"),
        ("error_rate:\n  margin: 0.01\n  margin: 0.05\n", "duplicate key 'margin'"),
    ],
)
def test_bad_files(tmp_path: Path, text: str, match: str) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match=match):
        load_policy(path)


def test_overrides_merge_field_by_field(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(
        "error_rate: {margin: 0.03}\n"
        "min_pairs_per_task_type: 80\n"
        "task_types:\n"
        "  extraction:\n"
        "    min_pairs: 200\n"
        "    error_rate: {critical: false}\n"
        "    format_parse: {success_flag: strict}\n"
        "  chat:\n",
        encoding="utf-8",
    )
    policy = load_policy(path)
    extraction = effective(policy, "extraction")
    assert extraction.min_pairs == 200
    assert (extraction.error_rate.margin, extraction.error_rate.critical) == (0.03, False)
    assert extraction.format_parse.success_flag == "strict"
    assert extraction.format_parse.margin == 0.01
    chat = effective(policy, "chat")
    assert chat.min_pairs == 80
    assert chat.error_rate.margin == 0.03
    other = effective(policy, "unlisted")
    assert (other.min_pairs, other.error_rate) == (80, policy.error_rate)
    pooled = effective(policy, POOLED)
    assert pooled.min_pairs == policy.min_pairs_pooled == 100


def test_yaml_round_trip_and_hash(tmp_path: Path) -> None:
    policy = parse_policy(
        {
            "alpha": 0.02,
            "latency": {"metrics": ["ttft_ms"], "p95_ratio_max": 1.3},
            "task_types": {"code": {"similarity": {"max_mean_divergence": 0.2}}},
        }
    )
    path = tmp_path / "resolved.yaml"
    path.write_text(policy_to_yaml(policy), encoding="utf-8")
    again = load_policy(path)
    assert again == policy
    assert policy_hash(again) == policy_hash(policy)
    assert len(policy_hash(policy)) == 64
    assert policy_hash(policy) != policy_hash(GatePolicy())
    changed = parse_policy({**policy.model_dump(mode="json"), "alpha": 0.021})
    assert policy_hash(changed) != policy_hash(policy)


def test_hash_ignores_layout_and_omitted_defaults() -> None:
    a = parse_policy({"alpha": 0.025, "error_rate": {"critical": True, "margin": 0.01}})
    b = parse_policy({"error_rate": {"margin": 0.01}})
    assert policy_hash(a) == policy_hash(b) == policy_hash(GatePolicy())


FROZEN_DEFAULT_HASH = "41c66b2263d8e83a6b68ecf08022200ea7a4e90177b367558842709aa66b4136"
"""The default policy's hash since issue 28: runs frozen under it keep being resumable."""


def test_a_new_policy_key_at_its_default_keeps_the_frozen_hash() -> None:
    """A key added later (``routes``, ``baseline_model``) is left out of the canonical JSON
    while empty, so a run frozen before it existed keeps its hash; set, it is a new run."""
    assert policy_hash(GatePolicy()) == FROZEN_DEFAULT_HASH
    # and a per-task-type override, whose resolved view holds every block too
    overridden = parse_policy({"task_types": {"a": {"min_pairs": 60}}})
    assert policy_hash(overridden) == (
        "03042eb1af3892cea5ac18fbeab35a0ef2bc7eb4ee4edbf7125bf1132652a6ba"
    )
    chosen = parse_policy({"baseline_model": "base-v1.1"})
    assert policy_hash(chosen) != FROZEN_DEFAULT_HASH
    assert chosen.baseline_model == "base-v1.1"


def test_policy_is_frozen() -> None:
    policy = GatePolicy()
    with pytest.raises(ValueError, match="frozen"):
        policy.alpha = 0.5  # type: ignore[misc]


@pytest.mark.parametrize(
    ("mapping", "field", "value", "explanation"),
    [
        ({"alpha": "0.05"}, "alpha", "'0.05'", "must be a YAML number (unquoted), not a string"),
        (
            {"min_pairs_per_task_type": "50"},
            "min_pairs_per_task_type",
            "'50'",
            "must be a YAML integer (unquoted, no decimal point), not a string",
        ),
        ({"error_rate": {"margin": "0.02"}}, "error_rate.margin", "'0.02'", "not a string"),
        ({"latency": {"p95_ratio_max": "2"}}, "latency.p95_ratio_max", "'2'", "not a string"),
        ({"similarity": {"tail_seed": "7"}}, "similarity.tail_seed", "'7'", "not a string"),
        ({"sequential": {"n_max": "5000"}}, "sequential.n_max", "'5000'", "not a string"),
        ({"sequential": {"n_max": 5000.0}}, "sequential.n_max", "5000.0", "not a float"),
        ({"version": "1"}, "version", "'1'", "not a string"),
        (
            {"task_types": {"code": {"min_pairs": "80"}}},
            "task_types.code.min_pairs",
            "'80'",
            "not a string",
        ),
        # integers must be integers: 2.0 is as wrong as 2.7
        ({"min_pairs_pooled": 100.0}, "min_pairs_pooled", "100.0", "not a float"),
        ({"min_pairs_pooled": 2.7}, "min_pairs_pooled", "2.7", "not a float"),
        ({"latency": {"min_pairs_p95": 100.0}}, "latency.min_pairs_p95", "100.0", "not a float"),
        ({"version": 1.0}, "version", "1.0", "not a float"),
        # booleans stay rejected, for numbers and integers alike
        ({"alpha": True}, "alpha", "True", "not true/false"),
        ({"min_pairs_pooled": False}, "min_pairs_pooled", "False", "not true/false"),
        ({"version": True}, "version", "True", "not true/false"),
        (
            {"similarity": {"max_mean_divergence": None}},
            "similarity.max_mean_divergence",
            "None",
            "not null",
        ),
    ],
)
def test_numbers_must_be_written_as_numbers(
    mapping: dict[str, object], field: str, value: str, explanation: str
) -> None:
    with pytest.raises(ConfigError) as info:
        parse_policy(mapping)
    assert info.value.field == field
    assert str(info.value).startswith(f"policy field {field} = {value}: must be a YAML ")
    assert explanation in str(info.value)


def test_quoted_numbers_in_a_yaml_file_are_rejected(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text('alpha: "0.05"\nmin_pairs_per_task_type: 50\n', encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_policy(path)
    assert info.value.field == "alpha"
    assert info.value.value == "0.05"
    path.write_text("alpha: 0.05\nmin_pairs_per_task_type: '50'\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="min_pairs_per_task_type = '50'"):
        load_policy(path)


def test_exponents_without_a_dot_are_numbers_quoted_ones_are_not(tmp_path: Path) -> None:
    # PyYAML (YAML 1.1) would read 5e-3 as a string; the policy loader reads it as YAML 1.2.
    path = tmp_path / "policy.yaml"
    path.write_text("alpha_harm: 5e-3\nalpha: 2.5E-2\n", encoding="utf-8")
    policy = load_policy(path)
    assert (policy.alpha_harm, policy.alpha) == (0.005, 0.025)
    path.write_text('alpha_harm: "5e-3"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match="alpha_harm = '5e-3': must be a YAML number"):
        load_policy(path)
    path.write_text("min_pairs_per_task_type: 1e2\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="min_pairs_per_task_type"):
        load_policy(path)


def test_floats_may_be_written_as_integers() -> None:
    policy = parse_policy(
        {
            "latency": {"p95_ratio_max": 2, "p50_ratio_max": 2},
            "similarity": {"max_mean_divergence": 1},
        }
    )
    assert policy.latency.p95_ratio_max == 2.0
    assert isinstance(policy.latency.p95_ratio_max, float)
    assert policy.similarity.max_mean_divergence == 1.0
    assert policy.min_coverage == 0.9
    assert parse_policy({"min_coverage": 1}).min_coverage == 1.0
    # and a round trip keeps integers integers
    assert isinstance(parse_policy({"min_pairs_pooled": 300}).min_pairs_pooled, int)


def test_infra_error_rate_overrides_merge_per_task_type() -> None:
    policy = parse_policy(
        {
            "infra_error_rate": {"margin": 0.03},
            "task_types": {"batch": {"infra_error_rate": {"margin": 0.1}}},
        }
    )
    assert effective(policy, "batch").infra_error_rate.margin == 0.1
    assert effective(policy, "chat").infra_error_rate.margin == 0.03
    assert effective(policy, POOLED).infra_error_rate.margin == 0.03
    assert not effective(policy, "batch").infra_error_rate.critical


def test_sample_cap_is_optional_and_checked_against_the_first_checkpoint() -> None:
    assert parse_policy({"sequential": {"n_max": None}}).sequential.n_max is None
    assert parse_policy({"sequential": {"n_max": 5000}}).sequential.n_max == 5000
    with pytest.raises(ConfigError) as info:
        parse_policy({"sequential": {"n_max": 100}})
    assert "n_max (100) must be >= first_checkpoint (200)" in str(info.value)


def test_output_tokens_and_similarity_override_per_task_type() -> None:
    policy = parse_policy(
        {
            "output_tokens": {"ratio_max": 1.5},
            "task_types": {
                "batch": {"output_tokens": {"enabled": False}, "similarity": {"noise_ratio": 1}}
            },
        }
    )
    batch = effective(policy, "batch")
    assert (batch.output_tokens.enabled, batch.output_tokens.ratio_max) == (False, 1.5)
    assert batch.similarity.noise_ratio == 1.0
    assert batch.similarity.noise_margin == 0.01
    assert effective(policy, POOLED).output_tokens.enabled


def test_a_judge_leaf_added_later_keeps_the_hash_of_a_run_frozen_before_it() -> None:
    """A run frozen with a non-default judge block before ``judge.max_flip_rate`` existed
    (its YAML lacks the key) keeps its hash: the leaf at its default is left out."""
    from shadoweval.stats.policy import parse_policy

    before = parse_policy({"judge": {"min_agreement_labels": 10}})
    explicit = parse_policy({"judge": {"min_agreement_labels": 10, "max_flip_rate": 0.5}})
    assert policy_hash(before) == policy_hash(explicit)
    assert "max_flip_rate" not in policy_to_yaml(before)
    assert policy_hash(parse_policy({"judge": {"max_flip_rate": 0.4}})) != policy_hash(before)
