"""The canary rehearsal (issue 16, recorded in docs/canary.md): the real Envoy binary, two
real mock-llm versions, the file capture log, and the controller (:func:`tick_canary`).

* A good candidate ramps 10% → 50% → 100% and the canary completes; every session keeps
  the version it started on while the share rises (read from the answers' ``model``).
* A candidate with planted harm (it refuses where the baseline answers) is rolled back
  within its first step; a candidate stream in flight at the rollback completes whole on
  the candidate, and the session's next request goes to the baseline.

Traffic is sent in rounds; after each, the test waits until the file sink has written
every exchange (the capture metrics), then ticks the controller. Windows are short
(``allow_short_windows``): a rehearsal, not a rollout. No sleeps: each wait is on a
condition.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from shadoweval.application.canary import TickReport, canary_view, start_canary, tick_canary
from shadoweval.capture.canary_split import WEIGHT_TOTAL, read_split
from shadoweval.capture.session_router import stable_bucket
from shadoweval.simulation.mock_llm import FaultConfig, create_app
from shadoweval.stats.canary.policy import parse_canary_policy
from shadoweval.storage import CanaryState, PolicyAuditAction, Repository
from tests.capture.test_envoy_canary import (
    BASELINE,
    CANDIDATE,
    CHAT,
    HELLO,
    ROWS,
    SLOW,
    CanaryFront,
    SlowStoryLatency,
    _row,
)
from tests.capture.upstreams import ServerThread
from tests.waiting import wait_until

REFUSAL = "I'm sorry, but I can't help with that."
HARMFUL_ROWS = [_row("hello", HELLO, REFUSAL), ROWS[1]]

SESSIONS_PER_ROUND = 60
"""New sessions each round (two turns each), beside one more turn of 20 earlier ones."""

POLICY = parse_canary_policy(
    {
        "steps": [
            {"share": 0.1, "min_window_s": 0.5, "min_requests_per_arm": 12},
            {"share": 0.5, "min_window_s": 0.5, "min_requests_per_arm": 40},
            {"share": 1.0, "min_window_s": 0.5, "min_requests_per_arm": 40},
        ],
        "allow_short_windows": True,
        "promote": {
            "error_rate_margin": 0.2,
            "harm_rate_margin": 0.2,
            "format_failure_margin": 0.2,
            "latency_ratio_margins": {"e2e_p50": 50.0},
            "min_ratings_per_arm": 1000,
        },
        "rollback": {
            "harm_rate_max_increase": 0.05,
            "latency_limits_ms": {"e2e_p99": 30000},
        },
    }
)


class Rehearsal(CanaryFront):
    """The canary front end writing its capture log to ``tmp/capture`` (the real file
    sink the controller reads), with traffic rounds that track each session's version."""

    def __init__(self, baseline_url: str, candidate_url: str, tmp: Path) -> None:
        self.log_dir = tmp / "capture"
        super().__init__(baseline_url, candidate_url, tmp / "split", log_dir=self.log_dir)
        self.sent = 0
        self.version_of: dict[str, str] = {}
        self.switched: list[str] = []
        self._ids = itertools.count()

    def wait_controller_split(self) -> None:
        """Wait until Envoy and the session router apply the split the controller wrote."""
        self.wait_applied(read_split(self.split_dir).revision)

    def turn(self, client: httpx.Client, session: str) -> None:
        body = orjson.dumps({"model": "m", "messages": HELLO})
        resp = client.post(
            f"{self.harness.url}{CHAT}", content=body, headers={"x-session-id": session}
        )
        assert resp.status_code == 200, resp.text
        self.sent += 1
        model = str(resp.json()["model"])
        if self.version_of.setdefault(session, model) != model:
            self.switched.append(session)

    def round(self, client: httpx.Client) -> None:
        """New sessions (two turns each) and one more turn of earlier ones; then wait until
        the file sink wrote every exchange."""
        earlier = list(self.version_of)[-20:]
        for _ in range(SESSIONS_PER_ROUND):
            session = f"s-{next(self._ids)}"
            self.turn(client, session)
            self.turn(client, session)
        for session in earlier:
            self.turn(client, session)
        self.wait_written()

    def wait_written(self) -> None:
        wait_until(
            lambda: (
                self.harness.metric("shadoweval_capture_produced_total", sink="file") >= self.sent
            ),
            f"{self.sent} exchanges in the capture log",
        )


def _mock(model: str, rows: list, faults: FaultConfig | None = None) -> ServerThread:  # type: ignore[type-arg]
    app = create_app(
        rows, latency=SlowStoryLatency(), faults=faults or FaultConfig(), seed=0, model_name=model
    )
    return ServerThread(app)


@pytest.fixture
def good(tmp_path: Path) -> Iterator[Rehearsal]:
    with (
        _mock(BASELINE, ROWS) as baseline,
        _mock(CANDIDATE, ROWS) as candidate,
        Rehearsal(baseline.url, candidate.url, tmp_path) as rehearsal,
    ):
        yield rehearsal


@pytest.fixture
def harmful(tmp_path: Path) -> Iterator[Rehearsal]:
    with (
        _mock(BASELINE, ROWS) as baseline,
        _mock(CANDIDATE, HARMFUL_ROWS) as candidate,
        Rehearsal(baseline.url, candidate.url, tmp_path) as rehearsal,
    ):
        yield rehearsal


def _tick_until_moved(
    rehearsal: Rehearsal, repo: Repository, canary_id: str, client: httpx.Client, rounds: int
) -> list[TickReport]:
    """Rounds of traffic, a tick after each, until the canary leaves its step (at most
    ``rounds`` rounds); the step windows (0.5 s) pass during the traffic."""
    reports: list[TickReport] = []
    for _ in range(rounds):
        rehearsal.round(client)
        report = tick_canary(
            repo, canary_id, spec=rehearsal.spec, capture_log=rehearsal.log_dir, actor="rehearsal"
        )
        reports.append(report)
        verdict = report.verdict
        if verdict is not None:  # the record docs/canary.md quotes (shown with pytest -s)
            print(
                f"step {verdict_step(report)} share {report.from_share:g}: {report.action}; "
                f"requests baseline {verdict.n_baseline} candidate {verdict.n_candidate}; "
                f"new sessions {verdict.sessions_baseline}/{verdict.sessions_candidate}; "
                f"{'; '.join(verdict.reasons)}"
            )
        if report.action != "held":
            rehearsal.wait_controller_split()
            return reports
    return reports


def test_a_good_candidate_ramps_to_full_rollout(
    good: Rehearsal, repo: Repository, run: str
) -> None:
    canary = start_canary(
        repo, run_id=run, policy=POLICY, spec=good.spec, require_promote=False, why="rehearsal"
    )
    good.wait_controller_split()
    actions: list[str] = []
    with httpx.Client(timeout=60) as client:
        for _ in POLICY.steps:
            reports = _tick_until_moved(good, repo, canary.canary_id, client, rounds=8)
            actions.append(reports[-1].action)
            assert reports[-1].action in ("advanced", "completed"), [
                (r.action, r.verdict.reasons if r.verdict else ()) for r in reports
            ]
    assert actions == ["advanced", "advanced", "completed"]
    assert good.switched == []  # no session changed version mid-conversation
    view = canary_view(repo, canary.canary_id)
    assert view.canary.state is CanaryState.COMPLETED
    assert [s.share for s in view.steps] == [0.1, 0.5, 1.0]
    assert [s.outcome for s in view.steps] == ["promoted", "promoted", "promoted"]
    actions_audited = [
        e.action for e in view.audit if e.action is not PolicyAuditAction.CANARY_HELD
    ]
    assert actions_audited == [
        PolicyAuditAction.CANARY_STARTED,
        PolicyAuditAction.CANARY_ADVANCED,
        PolicyAuditAction.CANARY_ADVANCED,
        PolicyAuditAction.CANARY_COMPLETED,
    ]
    advanced = [e for e in view.audit if e.action is PolicyAuditAction.CANARY_ADVANCED]
    assert [e.detail["share"] for e in advanced] == [0.5, 1.0]
    assert view.audit[-1].action is PolicyAuditAction.CANARY_COMPLETED
    assert read_split(good.split_dir).candidate_share == 1.0
    # at full rollout every new session went to the candidate; conversations pinned to
    # the baseline earlier finished there
    observed = repo.canary_observations(canary.canary_id)
    earlier = {o.session for o in observed if o.step_index < 2}
    last_step = [o for o in observed if o.step_index == 2]
    assert {o.arm for o in last_step if o.session not in earlier} == {"candidate"}
    assert "baseline" in {o.arm for o in last_step if o.session in earlier}


def test_planted_harm_is_rolled_back_within_one_step_and_a_stream_in_flight_completes(
    harmful: Rehearsal, repo: Repository, run: str
) -> None:
    canary = start_canary(
        repo, run_id=run, policy=POLICY, spec=harmful.spec, require_promote=False, why="rehearsal"
    )
    harmful.wait_controller_split()
    with httpx.Client(timeout=60) as client:
        # a session on the candidate starts a long stream before the controller ticks
        slow = next(
            f"slow-{i}"
            for i in itertools.count()
            if _bucket_is_candidate(POLICY.steps[0].share, f"slow-{i}")
        )
        body = orjson.dumps({"model": "m", "messages": SLOW, "stream": True})
        with client.stream(
            "POST", f"{harmful.harness.url}{CHAT}", content=body, headers={"x-session-id": slow}
        ) as resp:
            assert resp.status_code == 200
            reader = resp.iter_lines()
            lines = [next(line for line in reader if line.startswith("data: "))]
            reports = _tick_until_moved(harmful, repo, canary.canary_id, client, rounds=4)
            assert reports[-1].action == "rolled_back", [
                (r.action, r.verdict.reasons if r.verdict else ()) for r in reports
            ]
            # the stream is still in flight in Envoy after the rollback was applied ...
            active = harmful.harness.envoy_stats("http.live.downstream_rq_active")
            assert active.get("http.live.downstream_rq_active", 0) >= 1, active
            # ... and a new request goes to the baseline at once
            harmful.turn(client, f"{slow}-next")
            assert harmful.version_of[f"{slow}-next"] == BASELINE
            lines.extend(line for line in reader if line.startswith("data: "))
    assert lines[-1] == "data: [DONE]"
    chunks = [orjson.loads(line[6:]) for line in lines[:-1]]
    assert {c["model"] for c in chunks} == {CANDIDATE}
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == ROWS[1].output_text
    view = canary_view(repo, canary.canary_id)
    assert view.canary.state is CanaryState.ROLLED_BACK
    assert [s.outcome for s in view.steps] == ["rolled_back"]  # within its first step
    rolled = view.audit[-1]
    assert rolled.action is PolicyAuditAction.CANARY_ROLLED_BACK
    reasons = rolled.detail["reasons"]
    assert isinstance(reasons, list)
    assert any("harm" in str(reason) for reason in reasons), reasons
    assert read_split(harmful.split_dir).candidate_share == 0.0
    with httpx.Client(timeout=60) as client:
        for i in range(20):
            harmful.turn(client, f"after-{i}")
    assert {harmful.version_of[f"after-{i}"] for i in range(20)} == {BASELINE}
    assert harmful.switched == []


def verdict_step(report: TickReport) -> int:
    """The step a tick judged (the canary's step before it moved)."""
    step = report.canary.step_index
    return step - 1 if report.action == "advanced" else step


def _bucket_is_candidate(share: float, session: str) -> bool:
    """Whether a new session goes to the candidate at ``share`` (the router's bucket rule)."""
    return stable_bucket(session) < round(share * WEIGHT_TOTAL)
