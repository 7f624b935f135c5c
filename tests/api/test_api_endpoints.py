"""The API's endpoints through httpx.ASGITransport, over real runs (SQLite and PostgreSQL)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from typer.testing import CliRunner

from shadoweval.api.schemas import VerdictOut
from shadoweval.cli import app as cli_app
from shadoweval.records import Check, CheckOutcome, Coverage, Decision, Verdict
from shadoweval.storage import PolicyAuditAction, Repository, RunStatus

from .conftest import RUN_IDS, TOKEN

pytestmark = pytest.mark.anyio

AUTH = {"Authorization": f"Bearer {TOKEN}"}


async def get(app: Starlette, path: str, **params: Any) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
        return await client.get(path, headers=AUTH, params=params)


async def test_runs_lists_every_run_newest_first_with_its_latest_decision(
    app: Starlette, api_repo: Repository
) -> None:
    response = await get(app, "/v1/runs")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    runs = response.json()["runs"]
    assert [r["run_id"] for r in runs] == list(reversed(RUN_IDS))
    for row in runs:
        stored = api_repo.get_run(row["run_id"])
        assert stored is not None
        assert row["name"] == stored.name
        assert row["status"] == stored.status.value
        assert row["policy_hash"] == stored.policy_hash
        assert row["baseline"]["name"] == "demo-baseline-v1"
        assert row["candidate"]["name"] == "candidate-v2"
        assert row["created_at"].endswith("Z")
        latest = api_repo.latest_verdict(row["run_id"])
        if latest is None:
            assert row["latest"] is None
        else:
            assert row["latest"]["decision"] == latest.decision.value
            assert row["latest"]["look"] == latest.look
    by_id = {r["run_id"]: r for r in runs}
    assert by_id["rolled"]["latest"]["decision"] == "rollback"
    assert by_id["rolled"]["status"] == RunStatus.ROLLED_BACK.value
    assert by_id["held"]["latest"] is not None
    assert by_id["fresh"]["latest"] is None  # never gated
    assert by_id["fresh"]["status"] == RunStatus.OPEN.value


async def test_runs_filter_by_status_and_limit(app: Starlette) -> None:
    rolled = await get(app, "/v1/runs", status="rolled_back")
    assert [r["run_id"] for r in rolled.json()["runs"]] == ["rolled"]
    limited = await get(app, "/v1/runs", limit=1)
    assert [r["run_id"] for r in limited.json()["runs"]] == ["fresh"]
    for params in ({"status": "shipped"}, {"limit": "0"}, {"limit": "many"}):
        bad = await get(app, "/v1/runs", **params)
        assert bad.status_code == 400
        assert bad.json()["error"] == "bad_request"
        assert next(iter(params.values())) in bad.json()["detail"]


async def test_stored_verdict_has_every_field_of_the_gate(
    app: Starlette, api_repo: Repository
) -> None:
    response = await get(app, "/v1/runs/rolled/verdict")
    assert response.status_code == 200
    body = response.json()
    stored = api_repo.latest_verdict("rolled")
    assert stored is not None
    assert body["source"] == "stored"
    assert body["decision"] == "rollback"
    assert body["run_id"] == "rolled"
    assert body["look"] == stored.look == 1
    assert body["policy_hash"] == stored.policy_hash
    assert body["decided_at"].endswith("Z")
    assert Coverage.model_validate(body["coverage"]) == stored.coverage
    assert body["reasons"] == list(stored.reasons)
    assert len(body["checks"]) == len(stored.checks) > 0
    for got, want in zip(body["checks"], stored.checks, strict=True):
        assert set(got) == {
            "metric",
            "task_type",
            "statistic",
            "estimate",
            "ci_low",
            "ci_high",
            "margin",
            "n",
            "p_value",
            "outcome",
            "reason",
            "critical",
        }
        assert got["metric"] == want.metric
        assert got["task_type"] == want.task_type
        assert got["statistic"] == want.statistic
        assert got["outcome"] == want.outcome.value
        assert got["n"] == want.n
        assert got["reason"] == want.reason
        assert got["critical"] == want.critical
        for field in ("estimate", "ci_low", "ci_high", "margin", "p_value"):
            value = getattr(want, field)
            if value is None or value != value:  # None, or NaN sent as null
                assert got[field] is None
            else:
                assert got[field] == pytest.approx(value)
    assert {c["task_type"] for c in body["checks"]} >= {"__pooled__", "extraction"}
    assert any(c["outcome"] == "fail" for c in body["checks"])


async def test_a_run_without_verdict_is_gated_like_shadow_eval_gate(
    app: Starlette, api_repo: Repository, api_db_url: str
) -> None:
    first = await get(app, "/v1/runs/fresh/verdict")
    assert first.status_code == 200
    computed = first.json()
    assert computed["source"] == "computed"
    assert computed["look"] == 1
    history = api_repo.verdict_history("fresh")
    assert [(e.command, e.verdict.decision) for e in history] == [
        ("shadow-eval api", Decision(computed["decision"]))
    ]
    assert computed["decision"] == "rollback"  # the source run's decision, recomputed
    run = api_repo.get_run("fresh")
    assert run is not None
    assert run.status is RunStatus.ROLLED_BACK
    audit = api_repo.policy_audit("fresh")[-1]
    assert audit.action is PolicyAuditAction.USED
    assert audit.command == "shadow-eval api"
    assert audit.detail["policy_source"] == "run"

    again = await get(app, "/v1/runs/fresh/verdict")
    assert again.json() == {**computed, "source": "stored"}
    assert len(api_repo.verdict_history("fresh")) == 1

    # The CLI gives the same decision and checks (same code path) on the same data.
    gated = CliRunner().invoke(
        cli_app, ["gate", "--run", "fresh", "--database-url", api_db_url, "--json"]
    )
    cli_verdict = Verdict.model_validate_json(gated.stdout)
    assert gated.exit_code == 2
    assert cli_verdict.decision.value == computed["decision"]
    assert cli_verdict.look == computed["look"]  # terminal: the stored verdict
    assert [(c.task_type, c.metric, c.outcome.value) for c in cli_verdict.checks] == [
        (c["task_type"], c["metric"], c["outcome"]) for c in computed["checks"]
    ]


async def test_audit_log_of_a_run(app: Starlette, api_repo: Repository) -> None:
    api_repo.record_policy_audit(
        run_id="held",
        policy_hash="sha256:other",
        action=PolicyAuditAction.REFUSED,
        command="shadow-eval gate",
        actor="carol",
        detail={"run_policy_hash": "sha256:x", "presented_policy_hash": "sha256:other"},
    )
    response = await get(app, "/v1/runs/held/audit")
    assert response.status_code == 200
    body = response.json()
    assert body["run_id"] == "held"
    actions = [(e["action"], e["command"]) for e in body["entries"]]
    assert actions[0][0] == "created"
    assert actions[-1] == ("refused", "shadow-eval gate")
    last = body["entries"][-1]
    assert last["actor"] == "carol"
    assert last["detail"]["presented_policy_hash"] == "sha256:other"
    assert last["recorded_at"].endswith("Z")


@pytest.mark.parametrize("path", ["/v1/runs/nope/verdict", "/v1/runs/nope/audit"])
async def test_unknown_run_is_404_json(app: Starlette, path: str) -> None:
    response = await get(app, path)
    assert response.status_code == 404
    assert response.json() == {"error": "not_found", "detail": "run 'nope' not found"}


async def test_unknown_path_and_method_are_json_errors(app: Starlette) -> None:
    missing = await get(app, "/v2/nothing")
    assert missing.status_code == 404
    assert missing.json()["error"] == "not_found"
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
        post = await client.post("/v1/runs", headers=AUTH)
    assert post.status_code == 405
    assert post.json()["error"] == "method_not_allowed"


def test_a_float_the_gate_could_not_compute_is_null_never_nan() -> None:
    """JSON has no NaN: a NaN estimate (an inconclusive check) is sent as null."""
    verdict = Verdict(
        run_id="r",
        decision=Decision.HOLD,
        checks=(
            Check(
                metric="similarity",
                task_type="chat",
                statistic="one-sided t",
                estimate=float("nan"),
                ci_low=float("-inf"),
                outcome=CheckOutcome.INCONCLUSIVE,
                reason="similarity not a number in 3 pairs",
            ),
        ),
        coverage=Coverage(
            captured=3, replayed=3, paired=3, errored=0, warmup=0, skipped=0, share=1.0
        ),
        policy_hash="h",
    )
    text = VerdictOut.of(verdict, "computed").model_dump_json()
    assert "NaN" not in text
    assert "Infinity" not in text
    check = httpx.Response(200, text=text).json()["checks"][0]
    assert check["estimate"] is None
    assert check["ci_low"] is None
