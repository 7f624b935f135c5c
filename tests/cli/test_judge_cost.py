"""The cost of a decision (issue 31 items 2–3): ``judge run`` against the mock judge on a
real socket prints its plan before sending, stops cleanly at a token or money budget with
exactly the judged pairs stored, and refuses a judge that is one of the arms (same model
name, same URL) while naming a judge of an arm's family as a self-preference risk.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from shadoweval.application.judging.cost import BudgetOutcome, cost_plan
from shadoweval.cli import app
from shadoweval.judge.cost import JudgeBudget, JudgeSpend, PairEstimate, TokenSource
from shadoweval.judge.prompt import SYSTEM_PROMPT, USER_TEMPLATE
from shadoweval.records import JudgementSource, ModelIdentity
from shadoweval.serving import BackgroundServer
from shadoweval.simulation.mock_judge import JudgeState, create_judge_app
from shadoweval.stats.policy import DEFAULT_POLICY_FILE, load_policy, parse_policy
from shadoweval.storage import Database, PolicyAuditAction, Repository
from tests.judge.seed import (
    CHAT_CHANGED,
    CODE_CHANGED,
    RULE,
    RUN_ID,
    USAGE_BASELINE,
    USAGE_CANDIDATE,
    seed_judge_run,
)

PAIRS = CHAT_CHANGED + CODE_CHANGED
MAX_TOKENS = 512
"""The judge's default ``max_tokens``: the completion bound of every call."""
TEMPLATE_TOKENS = (
    math.ceil(len(SYSTEM_PROMPT) / 4)
    + math.ceil(len(USER_TEMPLATE.format(conversation="", tools="", answer_a="", answer_b="")) / 4)
    + 2 * 4
)
"""The text prompt's template by chars/4, and 4 tokens per message for the role markers."""
CALL_PROMPT = TEMPLATE_TOKENS + sum(
    count or 0
    for count in (
        USAGE_BASELINE.prompt_tokens,
        USAGE_BASELINE.completion_tokens,
        USAGE_CANDIDATE.completion_tokens,
    )
)
"""One call's estimated prompt from the captured usage: template + request + both answers."""
PAIR_ESTIMATE = 2 * (CALL_PROMPT + MAX_TOKENS)
PREFLIGHT_ESTIMATE = CALL_PROMPT + MAX_TOKENS


def cli(*args: object) -> Result:
    return CliRunner().invoke(app, [str(a) for a in args])


def flat(text: str) -> str:
    return " ".join(text.replace("│", " ").replace("┃", " ").split())


def seeded(tmp_path: Path, name: str = "cost.db", **kwargs: Any) -> str:
    url = f"sqlite:///{tmp_path / name}"
    with Database(url) as db:
        db.upgrade()
        seed_judge_run(Repository(db), usage=True, **kwargs)
    return url


@pytest.fixture
def judge_server() -> Iterator[tuple[str, JudgeState]]:
    app_ = create_judge_app(RULE, model_name="mock-judge")
    with BackgroundServer(app_, start_timeout_s=60.0) as server:
        yield server.url, app_.state.judge


def configure(monkeypatch: pytest.MonkeyPatch, url: str, model: str = "mock-judge") -> None:
    monkeypatch.setenv("SHADOWEVAL_JUDGE__URL", url)
    monkeypatch.setenv("SHADOWEVAL_JUDGE__MODEL", model)
    monkeypatch.setenv("SHADOWEVAL_JUDGE__SEND_PAIRS", "true")


def stored(url: str) -> tuple[list[Any], list[Any]]:
    with Database(url) as db:
        repo = Repository(db)
        return repo.list_judgements(RUN_ID, JudgementSource.JUDGE), repo.policy_audit(RUN_ID)


def vote_tokens(judgements: list[Any]) -> int:
    return sum(
        (v.prompt_tokens or 0) + (v.completion_tokens or 0) for j in judgements for v in j.votes
    )


def test_the_plan_counts_pairs_calls_and_tokens_before_anything_is_sent(
    tmp_path: Path, judge_server: tuple[str, JudgeState], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plan from the captured usage: 17 pairs, 34 calls + 1 preflight, each call's
    prompt = template + request + both answers; ``--dry-run`` sends nothing; a real run
    prints the same plan before its table and sends exactly the planned calls."""
    url, state = judge_server
    configure(monkeypatch, url)
    db = seeded(tmp_path)
    dry = cli("judge", "run", "--run", RUN_ID, "--database-url", db, "--dry-run", "--json")
    assert dry.exit_code == 0, dry.output
    plan = json.loads(dry.stdout)["plan"]
    assert (plan["pairs"], plan["calls"], plan["preflight_calls"]) == (PAIRS, 2 * PAIRS, 1)
    assert plan["estimate_sources"] == {"captured usage": PAIRS, "mixed": 0, "chars/4": 0}
    assert plan["prompt_tokens_estimate"] == (2 * PAIRS + 1) * CALL_PROMPT
    assert plan["completion_tokens_max"] == (2 * PAIRS + 1) * MAX_TOKENS
    assert plan["budget"]["tokens"] is None
    assert plan["pairs_within_budget_estimate"] is None
    assert "plan: 17 pairs, 34 judge calls (both orders) + 1 preflight call" in flat(dry.stderr)
    assert state.requests == 0
    _, audit = stored(db)
    assert not [e for e in audit if e.action.value.startswith("judge_")]

    real = cli("judge", "run", "--run", RUN_ID, "--database-url", db)
    assert real.exit_code == 0, real.output
    out = flat(real.stdout)
    expected = (2 * PAIRS + 1) * (CALL_PROMPT + MAX_TOKENS)
    assert (
        f"plan: 17 pairs, 34 judge calls (both orders) + 1 preflight call; estimated "
        f"{(2 * PAIRS + 1) * CALL_PROMPT} prompt tokens (from captured usage: 17 pairs) + at most "
        f"{(2 * PAIRS + 1) * MAX_TOKENS} completion tokens (max_tokens 512 per call) = "
        f"{expected} tokens"
    ) in out
    assert out.index("plan: 17 pairs") < out.index("judge run of")
    assert "budget: none" in out
    assert state.requests == 2 * PAIRS + 1


def test_the_chars_estimate_is_named_where_no_usage_was_captured(
    tmp_path: Path, judge_server: tuple[str, JudgeState], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, state = judge_server
    configure(monkeypatch, url)
    db = f"sqlite:///{tmp_path / 'plain.db'}"
    with Database(db) as database:
        database.upgrade()
        seed_judge_run(Repository(database))  # no usage stored
    dry = cli("judge", "run", "--run", RUN_ID, "--database-url", db, "--dry-run", "--json")
    plan = json.loads(dry.stdout)["plan"]
    assert plan["estimate_sources"] == {"captured usage": 0, "mixed": 0, "chars/4": PAIRS}
    assert plan["calls"] == 2 * PAIRS
    assert plan["prompt_tokens_estimate"] > (2 * PAIRS + 1) * TEMPLATE_TOKENS
    assert "prompt tokens (chars/4: 17 pairs (no captured usage stored))" in flat(dry.stderr)
    assert state.requests == 0


def test_a_mixed_estimate_says_where_its_parts_came_from() -> None:
    mixed: list[TokenSource] = ["mixed"] * 27
    captured: list[TokenSource] = ["captured usage"] * 2
    sources = [*mixed, *captured, "chars/4"]
    estimates = [PairEstimate(f"e{n}", 100, 512, source) for n, source in enumerate(sources)]
    plan = cost_plan(estimates, JudgeBudget(), max_tokens=512, preflight=True)
    assert (
        "prompt tokens (from captured usage where stored, chars/4 for the rest: 2 pairs all "
        "from captured usage, 27 pairs mixed, 1 pairs all chars/4) + at most"
    ) in plan.lines()[0]
    only_mixed = cost_plan(estimates[:27], JudgeBudget(), max_tokens=512, preflight=False)
    only = "(from captured usage where stored, chars/4 for the rest: 27 pairs mixed)"
    assert only in only_mixed.lines()[0]


def test_a_token_budget_stops_after_k_pairs_with_k_stored(
    tmp_path: Path, judge_server: tuple[str, JudgeState], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The budget admits the preflight and a few pairs by estimate; the judge's real usage
    (smaller) lets more through; the run stops when the next pair's estimate does not fit,
    stores exactly the pairs judged, says so, exits 0 — and a later run judges the rest."""
    url, state = judge_server
    configure(monkeypatch, url)
    db = seeded(tmp_path)
    budget = PREFLIGHT_ESTIMATE + 3 * PAIR_ESTIMATE
    result = cli("judge", "run", "--run", RUN_ID, "--database-url", db,
                 "--budget-tokens", budget, "--json")  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["plan"]["pairs_within_budget_estimate"] == 3
    assert report["plan"]["exceeds_budget"] is True
    assert "the estimate exceeds it: about 3 of 17 pairs fit" in flat(result.stderr)
    outcome = report["budget_outcome"]
    sent = outcome["sent"]
    assert outcome["status"] == "budget_reached"
    assert 3 <= sent < PAIRS
    judgements, _ = stored(db)
    assert len(judgements) == sent
    assert all(j.outcome is not None for j in judgements)
    assert state.requests == 2 * sent + 1
    # every token the judge reported is counted: the stored votes' and the preflight's
    used = outcome["tokens"]
    preflight = used - vote_tokens(judgements)
    first_votes = {
        (v.prompt_tokens or 0) + (v.completion_tokens or 0)
        for j in judgements
        for v in j.votes
        if v.order == "baseline_first"
    }
    assert preflight in first_votes
    assert used <= budget < used + PAIR_ESTIMATE  # the next pair did not fit
    assert outcome["next_pair_tokens_estimate"] == PAIR_ESTIMATE
    assert (outcome["preflight_tokens"], outcome["pair_tokens"]) == (preflight, used - preflight)
    assert outcome["over_budget"] is False
    message = (
        f"budget of {budget} tokens reached after {sent} of {PAIRS} pairs ({used - preflight} "
        f"tokens used (+{preflight} preflight = {used})); the next pair's two calls were "
        f"estimated at {PAIR_ESTIMATE} tokens;"
    )
    assert message in flat(result.stderr)
    tallies = {t["task_type"]: t for t in report["task_types"]}
    # the run's table, judge summary and the message agree on the pairs' tokens
    table = sum(t["prompt_tokens"] + t["completion_tokens"] for t in tallies.values())
    assert table == outcome["pair_tokens"] == vote_tokens(judgements)
    summary = cli("judge", "summary", "--run", RUN_ID, "--database-url", db, "--json")
    assert sum(json.loads(summary.stdout)["judge_tokens"].values()) == outcome["pair_tokens"]
    assert sum(t["not_sent"] for t in tallies.values()) == PAIRS - sent
    assert sum(t["selected"] for t in tallies.values()) == sent
    assert all(t["judged"] >= 1 for t in tallies.values())  # interleaved: both task types

    rest = cli("judge", "run", "--run", RUN_ID, "--database-url", db)
    assert rest.exit_code == 0, rest.output
    assert f"{PAIRS - sent} pairs sent" in flat(rest.stdout)
    assert "preflight: 1 call, " in flat(rest.stdout)
    assert "neither this table nor judge summary counts it; the budget does" in flat(rest.stdout)
    judgements, _ = stored(db)
    assert len(judgements) == PAIRS


def test_a_money_budget_from_the_policy_stops_the_same_way(
    tmp_path: Path, judge_server: tuple[str, JudgeState], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, state = judge_server
    configure(monkeypatch, url)
    budget_usd = (PREFLIGHT_ESTIMATE + 2 * PAIR_ESTIMATE) * 3.0 / 1e6
    policy = parse_policy(
        {"judge": {"budget_usd": budget_usd, "price_per_million_input_tokens": 3.0,
                   "price_per_million_output_tokens": 3.0}}
    )  # fmt: skip
    db = seeded(tmp_path, policy=policy)
    result = cli("judge", "run", "--run", RUN_ID, "--database-url", db)
    assert result.exit_code == 0, result.output
    out, err = flat(result.stdout), flat(result.stderr)
    assert "about 2 of 17 pairs fit" in out
    assert "≈ $" in out
    judgements, _ = stored(db)
    sent = len(judgements)
    assert 2 <= sent < PAIRS
    assert f"budget of ${budget_usd:g} reached after {sent} of {PAIRS} pairs ($" in err
    assert state.requests == 2 * sent + 1


def test_a_budget_below_the_first_pair_sends_nothing_and_exits_3(
    tmp_path: Path, judge_server: tuple[str, JudgeState], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, state = judge_server
    configure(monkeypatch, url)
    db = seeded(tmp_path)
    result = cli("judge", "run", "--run", RUN_ID, "--database-url", db, "--budget-tokens", 100)
    assert result.exit_code == 3, result.output
    assert "about 0 of 17 pairs fit" in flat(result.stdout)
    assert "judge run: nothing sent: budget of 100 tokens reached before any of 17 pairs" in (
        flat(result.stderr)
    )
    assert state.requests == 0
    judgements, audit = stored(db)
    assert judgements == []
    assert not [e for e in audit if e.action.value.startswith("judge_")]


def test_bad_budgets_name_the_field(
    tmp_path: Path, judge_server: tuple[str, JudgeState], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, state = judge_server
    configure(monkeypatch, url)
    db = seeded(tmp_path)
    unpriced = cli("judge", "run", "--run", RUN_ID, "--database-url", db, "--budget-usd", 2)
    assert unpriced.exit_code == 3
    assert (
        "--budget-usd 2 needs the judge's prices, and they live in the run's frozen policy, "
        "which has no judge.price_per_million_input_tokens"
    ) in flat(unpriced.stderr)
    assert "so this run cannot use --budget-usd; --budget-tokens works" in flat(unpriced.stderr)
    zero = cli("judge", "run", "--run", RUN_ID, "--database-url", db, "--budget-tokens", 0)
    assert zero.exit_code == 3
    assert "--budget-tokens 0 must be >= 1" in flat(zero.stderr)
    assert state.requests == 0


@pytest.mark.parametrize(
    ("model", "candidate_url", "field"),
    [
        ("candidate-7b", None, "SHADOWEVAL_JUDGE__MODEL='candidate-7b' is the candidate model"),
        ("Org/Baseline-7B", None, "SHADOWEVAL_JUDGE__MODEL='Org/Baseline-7B' is the baseline"),
        ("mock-judge", "same", "is the candidate URL"),
    ],
)
def test_a_judge_that_is_an_arm_is_refused(
    tmp_path: Path,
    judge_server: tuple[str, JudgeState],
    monkeypatch: pytest.MonkeyPatch,
    model: str,
    candidate_url: str | None,
    field: str,
) -> None:
    """Same model name (case and organisation prefix aside) or the same server (here the
    candidate at ``localhost``, the judge at ``127.0.0.1/v1``): exit 3 naming the setting
    and value, nothing sent, no judge frozen."""
    url, state = judge_server
    port = url.rsplit(":", 1)[1]
    served = f"http://localhost:{port}" if candidate_url else None
    db = seeded(tmp_path, candidate_base_url=served)
    configure(monkeypatch, f"{url}/v1", model=model)
    result = cli("judge", "run", "--run", RUN_ID, "--database-url", db)
    assert result.exit_code == 3, result.output
    err = flat(result.stderr)
    assert "the judge is one of the arms it would judge" in err
    assert field in err
    if candidate_url:
        assert f"SHADOWEVAL_JUDGE__URL='{url}/v1'" in err
    assert state.requests == 0
    judgements, audit = stored(db)
    assert judgements == []
    assert not [e for e in audit if e.action.value.startswith("judge_")]


BFCL_BASELINE = ModelIdentity(name="NousResearch_Hermes-2-Pro-Mistral-7B")
BFCL_CANDIDATE = ModelIdentity(name="NousResearch_Hermes-2-Pro-Llama-3-8B")
"""The arms as the bfcl import names them: ``Org/Model`` written ``Org_Model``."""


@pytest.mark.parametrize(
    ("model", "arm"),
    [
        ("Hermes-2-Pro-Mistral-7B", "the baseline model 'NousResearch_Hermes-2-Pro-Mistral-7B'"),
        ("Hermes-2-Pro-Llama-3-8B-Q4_K_M",
         "the candidate model 'NousResearch_Hermes-2-Pro-Llama-3-8B'"),
    ],
)  # fmt: skip
def test_the_bfcl_imports_arms_are_refused_without_their_org_or_quantisation(
    tmp_path: Path,
    judge_server: tuple[str, JudgeState],
    monkeypatch: pytest.MonkeyPatch,
    model: str,
    arm: str,
) -> None:
    url, state = judge_server
    configure(monkeypatch, url, model=model)
    db = seeded(tmp_path, baseline=BFCL_BASELINE, candidate=BFCL_CANDIDATE)
    result = cli("judge", "run", "--run", RUN_ID, "--database-url", db, "--dry-run")
    assert result.exit_code == 3, result.output
    assert f"SHADOWEVAL_JUDGE__MODEL={model!r} is {arm}" in flat(result.stderr)
    assert state.requests == 0


@pytest.mark.parametrize(
    ("model", "arms"),
    [
        ("Hermes-2-Pro-Llama-3-70B", ["baseline", "candidate"]),  # the family of both arms
        ("qwen2.5-7b-instruct", []),  # another family: judged, no risk named
    ],
)
def test_a_judge_that_is_no_bfcl_arm_is_judged_and_every_arm_of_its_family_named(
    tmp_path: Path,
    judge_server: tuple[str, JudgeState],
    monkeypatch: pytest.MonkeyPatch,
    model: str,
    arms: list[str],
) -> None:
    url, _ = judge_server
    configure(monkeypatch, url, model=model)
    db = seeded(tmp_path, baseline=BFCL_BASELINE, candidate=BFCL_CANDIDATE)
    result = cli("judge", "run", "--run", RUN_ID, "--database-url", db, "--dry-run", "--json")
    assert result.exit_code == 0, result.output
    risks = json.loads(result.stdout)["self_preference_risks"]
    named = {"baseline": BFCL_BASELINE.name, "candidate": BFCL_CANDIDATE.name}
    assert risks == [
        f"self-preference risk: judge {model!r} shares family 'hermes-2' with the {role} "
        f"{named[role]!r} (Zheng et al. 2023, 'Judging LLM-as-a-Judge', self-enhancement bias)"
        for role in arms
    ]


def test_a_run_above_its_cap_says_exceeded_never_reached() -> None:
    """The user's run: 4127 tokens for the pairs and 944 for the preflight against a cap of
    5000 — it says by how much it passed the cap, the preflight apart."""
    spend = JudgeSpend(prompt_tokens=4800, completion_tokens=271, preflight_tokens=944)
    stopped = BudgetOutcome("budget_reached", sent=2, planned=3, spend=spend,
                            next_pair_tokens=2100)  # fmt: skip
    message = stopped.message(JudgeBudget(tokens=5000))
    assert message.startswith(
        "budget of 5000 tokens exceeded by 71 (4127 tokens used (+944 preflight = 5071)): "
        "estimates are approximate; stopped after 2 of 3 pairs; the next pair's two calls "
        "were estimated at 2100 tokens;"
    )
    assert "reached" not in message
    complete = BudgetOutcome("complete", sent=3, planned=3, spend=spend)
    assert complete.message(JudgeBudget(tokens=5000)) == (
        "budget of 5000 tokens exceeded by 71 (4127 tokens used (+944 preflight = 5071)): "
        "estimates are approximate; all 3 pairs sent"
    )
    assert complete.as_dict(JudgeBudget(tokens=5000))["over_budget_by"] == "71"
    assert complete.message(JudgeBudget(tokens=6000)) == ""
    priced = JudgeBudget(usd=0.005, price_per_million_input_tokens=1.0,
                         price_per_million_output_tokens=1.0)  # fmt: skip
    assert complete.message(priced).startswith(
        "budget of $0.005 exceeded by $0.0001 ($0.0051 used, preflight included; 4127 tokens"
    )
    calibrated = JudgeSpend(prompt_tokens=3000, completion_tokens=100, reported_tokens=3000,
                            reported_estimate_tokens=2000)  # fmt: skip
    reached = BudgetOutcome("budget_reached", sent=2, planned=3, spend=calibrated,
                            next_pair_tokens=1000).message(JudgeBudget(tokens=4000))  # fmt: skip
    assert reached.startswith(
        "budget of 4000 tokens reached after 2 of 3 pairs (3100 tokens used); the next pair's "
        "two calls were estimated at 1000 tokens (×1.50 from the judge's usage so far: 1500);"
    )


def test_a_judge_of_an_arms_family_is_named_as_a_risk(
    tmp_path: Path, judge_server: tuple[str, JudgeState], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, _ = judge_server
    configure(monkeypatch, url, model="candidate-70b-instruct")
    db = seeded(tmp_path)
    risk = (
        "self-preference risk: judge 'candidate-70b-instruct' shares family 'candidate' with "
        "the candidate 'candidate-7b' (Zheng et al. 2023, 'Judging LLM-as-a-Judge', "
        "self-enhancement bias)"
    )
    result = cli("judge", "run", "--run", RUN_ID, "--database-url", db, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["self_preference_risks"] == [risk]
    assert risk in flat(result.stderr)
    summary = cli("judge", "summary", "--run", RUN_ID, "--database-url", db, "--json")
    assert json.loads(summary.stdout)["self_preference_risks"] == [risk]
    assert risk in flat(cli("judge", "summary", "--run", RUN_ID, "--database-url", db).stdout)
    _, audit = stored(db)
    assert PolicyAuditAction.JUDGE_FROZEN in [e.action for e in audit]


def test_evaluate_with_a_judge_at_the_candidate_url_is_refused_before_replaying(
    tmp_path: Path, judge_server: tuple[str, JudgeState], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, state = judge_server
    configure(monkeypatch, f"{url}/v1")
    log = tmp_path / "capture"
    log.mkdir()
    db = tmp_path / "e.db"
    result = cli("evaluate", "--capture-log", log, "--candidate-url", url,
                 "--database-url", f"sqlite:///{db}", "--judge", "--no-progress")  # fmt: skip
    assert result.exit_code == 3, result.output
    assert f"SHADOWEVAL_JUDGE__URL='{url}/v1' is the candidate URL" in flat(result.stderr)
    assert state.requests == 0
    assert not db.exists()


def test_the_default_policy_sets_no_budget() -> None:
    assert load_policy(DEFAULT_POLICY_FILE).judge.budget_tokens is None
