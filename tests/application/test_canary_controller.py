"""shadoweval.application.canary.tick_canary / run_canary: the controller judges the current step
and
acts — advance on PROMOTE (the split first, then the audited move), hold on HOLD (audited
once when the decision turns), roll back at once on ROLLBACK, complete at share 1.0 — and
a split changed by hand blocks promotion."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from shadoweval.application.canary import (
    TickReport,
    canary_view,
    evaluate_canary,
    run_canary,
    start_canary,
    tick_canary,
)
from shadoweval.capture.canary_split import Split, read_split, write_split
from shadoweval.capture.envoy_config import EnvoyConfigSpec
from shadoweval.errors import ConfigError
from shadoweval.stats.canary.policy import parse_canary_policy
from shadoweval.storage import CanaryObservation, CanaryState, PolicyAuditAction, Repository
from tests.application.conftest import split_spec

POLICY = parse_canary_policy(
    {
        "steps": [
            {"share": 0.1, "min_window_s": 60, "min_requests_per_arm": 100},
            {"share": 1.0, "min_window_s": 60, "min_requests_per_arm": 100},
        ],
        "allow_short_windows": True,
        "promote": {
            "error_rate_margin": 0.2,
            "harm_rate_margin": 0.2,
            "format_failure_margin": 0.2,
            "latency_ratio_margins": {"e2e_p50": 3.0},
        },
        "rollback": {"harm_rate_max_increase": 0.05, "latency_limits_ms": {"e2e_p99": 30000}},
    }
)


@pytest.fixture
def spec(tmp_path: Path) -> EnvoyConfigSpec:
    return split_spec(tmp_path / "split")


@pytest.fixture
def canary_id(repo: Repository, run: str, spec: EnvoyConfigSpec) -> str:
    return start_canary(
        repo, run_id=run, policy=POLICY, spec=spec, require_promote=False, why="test"
    ).canary_id


def _observe(
    repo: Repository,
    canary_id: str,
    *,
    baseline: int,
    candidate: int,
    harmed_candidate: int = 0,
    e2e_ms: float = 400.0,
) -> datetime:
    """One request per session on each arm of the current step, 10 ms apart from its start;
    returns the time just after the last."""
    canary = repo.get_canary(canary_id)
    assert canary is not None
    start = canary.step_started_at
    observations = []
    arms = ["baseline"] * baseline + ["candidate"] * candidate
    for i, arm in enumerate(arms):
        harmed = arm == "candidate" and i - baseline < harmed_candidate
        observations.append(
            CanaryObservation(
                exchange_id=f"ex-{canary.step_index}-{i:05d}",
                step_index=canary.step_index,
                arm=arm,
                observed_at=start + timedelta(milliseconds=10 * (i + 1)),
                session=f"s-{canary.step_index}-{i}",
                error=False,
                format_expected=False,
                format_ok=None,
                harmed=harmed,
                cache_hit=False,
                e2e_ms=e2e_ms + (i % 7),
                ttft_ms=None,
            )
        )
    repo.save_canary_observations(canary_id, observations)
    return start + timedelta(milliseconds=10 * (len(arms) + 1))


def _reasons(report: TickReport) -> tuple[str, ...]:
    return report.reasons


def test_a_passing_step_advances_the_split_first_and_audits_the_move(
    repo: Repository, canary_id: str, spec: EnvoyConfigSpec
) -> None:
    _observe(repo, canary_id, baseline=900, candidate=100)
    started = repo.get_canary(canary_id).step_started_at  # type: ignore[union-attr]
    report = tick_canary(repo, canary_id, spec=spec, now=started + timedelta(seconds=61))
    assert report.action == "advanced", _reasons(report)
    assert (report.from_share, report.to_share) == (0.1, 1.0)
    split = read_split(spec.canary.split_dir)  # type: ignore[union-attr]
    assert (split.candidate_share, split.revision) == (1.0, 1)
    assert (report.canary.step_index, report.canary.split_revision) == (1, 1)
    view = canary_view(repo, canary_id)
    assert [(s.share, s.outcome, s.last_decision) for s in view.steps] == [
        (0.1, "promoted", "promote"),
        (1.0, None, None),
    ]
    assert view.steps[0].last_verdict is not None
    assert view.steps[0].last_verdict.decision == "promote"
    moved = view.audit[-1]
    assert moved.action is PolicyAuditAction.CANARY_ADVANCED
    assert (moved.detail["step"], moved.detail["to_step"], moved.detail["share"]) == (0, 1, 1.0)


def test_a_step_inside_its_window_holds_audited_once(
    repo: Repository, canary_id: str, spec: EnvoyConfigSpec
) -> None:
    _observe(repo, canary_id, baseline=900, candidate=100)
    started = repo.get_canary(canary_id).step_started_at  # type: ignore[union-attr]
    for seconds in (10, 20):
        report = tick_canary(repo, canary_id, spec=spec, now=started + timedelta(seconds=seconds))
        assert report.action == "held"
        assert any("window" in reason for reason in _reasons(report)), _reasons(report)
    assert read_split(spec.canary.split_dir).revision == 0  # type: ignore[union-attr]
    view = canary_view(repo, canary_id)
    held = [e for e in view.audit if e.action is PolicyAuditAction.CANARY_HELD]
    assert len(held) == 1
    assert view.steps[0].evaluations == 2


def test_planted_harm_rolls_back_at_once(
    repo: Repository, canary_id: str, spec: EnvoyConfigSpec
) -> None:
    _observe(repo, canary_id, baseline=900, candidate=100, harmed_candidate=40)
    started = repo.get_canary(canary_id).step_started_at  # type: ignore[union-attr]
    report = tick_canary(repo, canary_id, spec=spec, now=started + timedelta(seconds=5))
    assert report.action == "rolled_back", _reasons(report)
    assert read_split(spec.canary.split_dir).candidate_share == 0.0  # type: ignore[union-attr]
    view = canary_view(repo, canary_id)
    assert view.canary.state is CanaryState.ROLLED_BACK
    last = view.audit[-1]
    assert last.action is PolicyAuditAction.CANARY_ROLLED_BACK
    assert str(last.detail["why"]).startswith("automatic rollback: ")
    assert tick_canary(repo, canary_id, spec=spec).action == "none"


def test_the_last_step_completes_and_the_split_stays_at_full(
    repo: Repository, canary_id: str, spec: EnvoyConfigSpec
) -> None:
    _observe(repo, canary_id, baseline=900, candidate=100)
    started = repo.get_canary(canary_id).step_started_at  # type: ignore[union-attr]
    assert tick_canary(repo, canary_id, spec=spec, now=started + timedelta(seconds=61)).action == (
        "advanced"
    )
    _observe(repo, canary_id, baseline=0, candidate=200)
    started = repo.get_canary(canary_id).step_started_at  # type: ignore[union-attr]
    report = tick_canary(repo, canary_id, spec=spec, now=started + timedelta(seconds=61))
    assert report.action == "completed", _reasons(report)
    assert report.canary.state is CanaryState.COMPLETED
    assert read_split(spec.canary.split_dir).candidate_share == 1.0  # type: ignore[union-attr]
    assert canary_view(repo, canary_id).audit[-1].action is PolicyAuditAction.CANARY_COMPLETED


def test_a_split_changed_by_hand_blocks_promotion(
    repo: Repository, canary_id: str, spec: EnvoyConfigSpec
) -> None:
    _observe(repo, canary_id, baseline=900, candidate=100)
    write_split(spec.canary.split_dir, spec, Split(candidate_share=0.3, revision=7))  # type: ignore[union-attr]
    started = repo.get_canary(canary_id).step_started_at  # type: ignore[union-attr]
    report = tick_canary(repo, canary_id, spec=spec, now=started + timedelta(seconds=61))
    assert report.action == "held"
    assert report.decision == "hold"
    assert any("changed the split's share by hand" in r for r in report.reasons)
    stored = canary_view(repo, canary_id).steps[0].last_verdict
    assert stored is not None
    assert list(stored.reasons) == list(report.reasons)
    assert read_split(spec.canary.split_dir).revision == 7  # type: ignore[union-attr]


def test_a_split_rewritten_at_the_same_share_does_not_block(
    repo: Repository, canary_id: str, spec: EnvoyConfigSpec
) -> None:
    """What a losing controller (or a refused start) leaves: another revision at the share
    the canary is at. It changes nothing a session sees, so it does not hold the canary."""
    _observe(repo, canary_id, baseline=900, candidate=100)
    write_split(spec.canary.split_dir, spec, Split(candidate_share=0.1, revision=5))  # type: ignore[union-attr]
    started = repo.get_canary(canary_id).step_started_at  # type: ignore[union-attr]
    report = tick_canary(repo, canary_id, spec=spec, now=started + timedelta(seconds=61))
    assert report.action == "advanced", report.reasons
    assert report.step_judged == 0
    assert read_split(spec.canary.split_dir).revision == 6  # type: ignore[union-attr]


def test_run_canary_stops_when_final_or_asked(
    repo: Repository, canary_id: str, spec: EnvoyConfigSpec
) -> None:
    seen: list[TickReport] = []
    stop = threading.Event()

    def on_tick(report: TickReport) -> None:
        seen.append(report)
        stop.set()

    canary = run_canary(
        repo, canary_id, spec=spec, capture_log=None, interval_s=3600, stop=stop, on_tick=on_tick
    )
    assert canary.state is CanaryState.RUNNING
    assert [r.action for r in seen] == ["held"]
    _observe(repo, canary_id, baseline=900, candidate=100, harmed_candidate=40)
    final = run_canary(repo, canary_id, spec=spec, capture_log=None, interval_s=3600)
    assert final.state is CanaryState.ROLLED_BACK
    with pytest.raises(ConfigError, match="interval_s = 0"):
        run_canary(repo, canary_id, spec=spec, capture_log=None, interval_s=0)


def test_evaluate_names_a_final_or_unknown_canary(repo: Repository, canary_id: str) -> None:
    with pytest.raises(ConfigError, match="canary_id = 'nope'"):
        evaluate_canary(repo, "nope")
    _, verdict = evaluate_canary(repo, canary_id)
    assert verdict.decision.value == "hold"
