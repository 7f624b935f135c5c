"""Unevaluated traffic and replay load in the gate (issue 13).

* a captured route that was never replayed (or replayed below ``min_coverage``) holds,
  naming the route and why, unless the policy exempts it (``routes``);
* a policy task type that matches no traffic holds, naming it and the closest name;
* a replay whose measured requests started below 95% of the asked rate marks every
  latency reason "measured under a different load";
* every verdict says what it evaluated, by route and by task type.

Simulated runs (seeded; conftest.py) judged by :func:`shadoweval.stats.gate.evaluate_gate` directly.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from shadoweval.errors import ConfigError
from shadoweval.records import (
    Coverage,
    Decision,
    PairJudgement,
    PairScore,
    ReplayPace,
    ReplayPass,
    RouteCoverage,
    Verdict,
)
from shadoweval.stats.frame import pairs_frame
from shadoweval.stats.gate import evaluate_gate
from shadoweval.stats.policy import (
    GatePolicy,
    parse_policy,
    parse_policy_yaml,
    policy_hash,
    policy_to_yaml,
    policy_traffic_problems,
)

Ties = Callable[[list[PairScore]], dict[str, PairJudgement]]

AA = {"chat": {"n": 1500}, "extraction": {"n": 1500, "format_expected": True}}
"""An A/A run large enough to PROMOTE at look 1 under the default policy."""
CHAT = "/v1/chat/completions"
RESPONSES = "/v1/embeddings"
"""A captured route no replay reads (its exchanges are all skipped)."""
RESPONSES_SKIP = "route not replayable: /v1/embeddings"


def coverage_of(
    scores: list[PairScore],
    *,
    responses: int = 0,
    passes: tuple[ReplayPass, ...] = (),
) -> Coverage:
    """Every pair on the chat route; ``responses`` more exchanges on /v1/embeddings, all
    skipped, spread over the task types (so no task type falls below min_coverage)."""
    per_task: dict[str, int] = {}
    for s in scores:
        per_task[s.task_type] = per_task.get(s.task_type, 0) + 1
    paired = dict(per_task)
    names = sorted(per_task)
    for i in range(responses):
        per_task[names[i % len(names)]] += 1
    n = len(scores)
    routes = {CHAT: RouteCoverage(captured=n, replayed=n, paired=n)}
    if responses:
        routes[RESPONSES] = RouteCoverage(
            captured=responses, skipped=responses, skip_reasons={RESPONSES_SKIP: responses}
        )
    captured = n + responses
    return Coverage(
        captured=captured,
        replayed=n + responses,
        paired=n,
        errored=0,
        warmup=0,
        skipped=responses,
        share=n / captured,
        per_task_type=per_task,
        per_route=routes,
        paired_per_task_type=paired,
        replay_passes=passes,
    )


def gate(
    scores: list[PairScore],
    coverage: Coverage,
    ties: Ties,
    policy: GatePolicy | None = None,
) -> Verdict:
    policy = policy or GatePolicy()
    return evaluate_gate(
        pairs_frame(scores, policy, ties(scores)), policy, run_id="r", coverage=coverage
    )


@pytest.fixture
def aa(simulate: Callable[..., list[PairScore]]) -> list[PairScore]:
    return simulate(AA)


# ------------------------------------------------------------------ routes


def test_a_fully_evaluated_run_promotes_and_says_what_it_evaluated(
    aa: list[PairScore], ties: Ties
) -> None:
    v = gate(aa, coverage_of(aa), ties)
    assert v.decision is Decision.PROMOTE, v.reasons
    assert v.reasons[-2] == (
        "coverage: 3000 of 3000 captured exchanges paired (100.0%); by route: "
        "/v1/chat/completions 3000 of 3000; by task type: chat 1500 of 1500, extraction "
        "1500 of 1500"
    )


def test_a_captured_route_never_replayed_holds_naming_the_route_and_reason(
    aa: list[PairScore], ties: Ties
) -> None:
    """The measured defect: 3000 chat pairs plus 150 /v1/embeddings exchanges (95.2%
    coverage, above min_coverage in the run and in each task type) promoted."""
    coverage = coverage_of(aa, responses=150)
    assert coverage.share > GatePolicy().min_coverage
    v = gate(aa, coverage, ties)
    assert v.decision is Decision.HOLD
    assert v.reasons[0].startswith(
        f"150 exchanges on /v1/embeddings were captured but not replayed (reason: "
        f"{RESPONSES_SKIP}); unevaluated traffic is not a pass: promotion is blocked"
    )
    assert "routes: {/v1/embeddings: {required: false}}" in v.reasons[0]
    assert "/v1/embeddings 0 of 150 (150 skipped)" in v.reasons[-2]
    assert "150 skipped (/v1/embeddings 150)" in v.reasons[-1]
    # Checks themselves are unaffected: nothing failed, the route is what holds.
    assert all(c.outcome.value != "fail" for c in v.checks)


def test_a_route_the_policy_exempts_is_a_note_not_a_hold(aa: list[PairScore], ties: Ties) -> None:
    policy = parse_policy({"routes": {RESPONSES: {"required": False}}})
    v = gate(aa, coverage_of(aa, responses=150), ties, policy)
    assert v.decision is Decision.PROMOTE, v.reasons
    [note] = [r for r in v.reasons if r.startswith("150 exchanges on /v1/embeddings")]
    assert "exempt by the policy (routes./v1/embeddings.required false)" in note
    assert "still count in the coverage" in note


def test_a_route_replayed_below_min_coverage_holds_with_its_share(
    aa: list[PairScore], ties: Ties
) -> None:
    coverage = coverage_of(aa)
    routes = dict(coverage.per_route)
    routes["/v1/completions"] = RouteCoverage(
        captured=100,
        replayed=60,
        skipped=40,
        paired=60,
        skip_reasons={"size: request body 17000000 bytes > 16777216": 40},
    )
    coverage = coverage.model_copy(update={"per_route": routes})
    v = gate(aa, coverage, ties)
    assert v.decision is Decision.HOLD
    assert v.reasons[0].startswith(
        "route /v1/completions has replay coverage 60.0% (60 paired of 100 captured; 40 "
        "skipped, reason: size: request body 17000000 bytes > 16777216), below "
        "min_coverage 90%"
    )


def test_replayed_but_unscored_route_says_so(aa: list[PairScore], ties: Ties) -> None:
    coverage = coverage_of(aa)
    routes = {**coverage.per_route, "/v1/completions": RouteCoverage(captured=5, replayed=5)}
    v = gate(aa, coverage.model_copy(update={"per_route": routes}), ties)
    assert v.decision is Decision.HOLD
    assert v.reasons[0].startswith(
        "5 exchanges on /v1/completions were captured and 5 replayed, but none was scored"
    )


def test_no_pairs_at_all_still_names_the_unevaluated_route(ties: Ties) -> None:
    coverage = Coverage(
        captured=15,
        replayed=15,
        paired=0,
        errored=0,
        warmup=0,
        skipped=15,
        share=0.0,
        per_task_type={"chat": 15},
        per_route={RESPONSES: RouteCoverage(captured=15, skipped=15)},
    )
    v = gate([], coverage, ties)
    assert v.decision is Decision.HOLD
    assert v.reasons[0].startswith("no data")
    assert v.reasons[1].startswith("invalid run: replay coverage 0.0%")
    assert v.reasons[2].startswith("15 exchanges on /v1/embeddings were captured but not replayed")


# ------------------------------------------------------------------ policy names


def test_a_policy_task_type_that_matches_no_traffic_holds_with_the_closest_name(
    aa: list[PairScore], ties: Ties
) -> None:
    """The measured defect: a tightened margin under ``extration`` changed nothing and the
    run promoted, where the same margin under ``extraction`` rolled back."""
    typo = parse_policy({"task_types": {"extration": {"format_parse": {"margin": 0.001}}}})
    v = gate(aa, coverage_of(aa), ties, typo)
    assert v.decision is Decision.HOLD
    assert v.reasons[0] == (
        "policy: task_types.extration matches no traffic (task types seen: chat, extraction); "
        "did you mean 'extraction'?: its thresholds apply to no pair, so the verdict would "
        "not be the one the policy asks for; promotion is blocked (correct the name: a "
        "corrected policy is a new run)"
    )
    right = parse_policy({"task_types": {"extraction": {"format_parse": {"margin": 0.001}}}})
    assert not any(
        "matches no traffic" in r for r in gate(aa, coverage_of(aa), ties, right).reasons
    )


def test_a_policy_route_that_matches_no_traffic_is_a_note(aa: list[PairScore], ties: Ties) -> None:
    policy = parse_policy({"routes": {"/v1/respones": {"required": False}}})
    v = gate(aa, coverage_of(aa), ties, policy)
    assert v.decision is Decision.PROMOTE, v.reasons
    assert any(r.startswith("policy: routes./v1/respones matches no traffic") for r in v.reasons)


def test_a_required_policy_route_that_matches_no_traffic_holds(
    aa: list[PairScore], ties: Ties
) -> None:
    """A route listed as required that got no traffic at all (found by the trial: it
    promoted with a note): nothing the operator asked to see evaluated was."""
    policy = parse_policy({"routes": {"/v1/completions": {"required": True}}})
    v = gate(aa, coverage_of(aa), ties, policy)
    assert v.decision is Decision.HOLD
    assert v.reasons[0].startswith("policy: routes./v1/completions matches no traffic")
    assert "the policy requires this route to be evaluated" in v.reasons[0]


def test_a_name_with_invisible_edges_is_shown_quoted(aa: list[PairScore], ties: Ties) -> None:
    policy = parse_policy({"task_types": {"chat ": {}}})
    v = gate(aa, coverage_of(aa), ties, policy)
    assert v.decision is Decision.HOLD
    assert v.reasons[0].startswith("policy: task_types.'chat ' matches no traffic")


def test_policy_traffic_problems_suggest_the_closest_name() -> None:
    policy = parse_policy({"task_types": {"Extration": {}, "zzz": {}, "chat": {}}})
    problems = policy_traffic_problems(policy, task_types={"chat", "extraction", "summary"})
    assert [(p.field, p.closest) for p in problems] == [
        ("task_types.Extration", "extraction"),
        ("task_types.zzz", None),
    ]
    assert problems[1].describe() == (
        "task_types.zzz matches no traffic (task types seen: chat, extraction, summary)"
    )
    routes = parse_policy({"routes": {"/v1/embeddings": {"required": False}}})
    assert policy_traffic_problems(routes, task_types=(), routes=None) == []  # not known


# ------------------------------------------------------------------ replay load


def _pass(achieved: float) -> ReplayPass:
    return ReplayPass(
        source="capture_log",
        pace=ReplayPace.RATE,
        asked_rate_per_s=500.0,
        achieved_rate_per_s=achieved,
        measured_starts=3000,
    )


def test_a_rate_shortfall_marks_every_latency_reason(aa: list[PairScore], ties: Ties) -> None:
    v = gate(aa, coverage_of(aa, passes=(_pass(13.9),)), ties)
    latency = [c for c in v.checks if c.metric.startswith("latency_")]
    assert latency
    for check in latency:
        assert check.reason.endswith(
            "; measured under a different load than asked: measured at 13.9 req/s of 500 asked"
        ), check.reason
    assert any(
        r.startswith("latency checks: measured under a different load than asked")
        and "below 95% of the asked rate" in r
        for r in v.reasons
    )
    on_rate = gate(aa, coverage_of(aa, passes=(_pass(480.0),)), ties)
    assert not any("different load" in c.reason for c in on_rate.checks)
    assert [c.outcome for c in on_rate.checks] == [c.outcome for c in v.checks]


# ------------------------------------------------------------------ the policy key


def test_routes_key_round_trips_and_leaves_other_policies_hashes_alone() -> None:
    plain = GatePolicy()
    assert "routes" not in policy_to_yaml(plain)  # empty: not written, not hashed
    exempt = parse_policy({"routes": {RESPONSES: {"required": False}}})
    assert policy_hash(exempt) != policy_hash(plain)
    again = parse_policy_yaml(policy_to_yaml(exempt))
    assert again == exempt
    assert not again.route_required(RESPONSES)
    assert again.route_required(CHAT)


@pytest.mark.parametrize(
    ("routes", "field", "words"),
    [
        ({"/v1/embeddings/": {}}, "routes", "without the trailing slash"),
        ({"v1/responses": {}}, "routes", "must be a path starting with '/'"),
        ({RESPONSES: {"required": "no"}}, "routes./v1/embeddings.required", "true or false"),
        ({RESPONSES: {"requird": False}}, "routes./v1/embeddings.requird", "allowed: required"),
    ],
)
def test_bad_routes_entries_are_refused_naming_the_field(
    routes: dict[str, object], field: str, words: str
) -> None:
    with pytest.raises(ConfigError) as info:
        parse_policy({"routes": routes})
    assert info.value.field == field
    assert words in str(info.value)
