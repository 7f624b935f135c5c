"""``shadow-eval judge run`` and ``judge summary`` against the mock judge on a real socket.

Sending pairs is refused unless switched on (nothing reaches the judge); with it, only
changed pairs are sent, within the budget, redacted, with the judge's own key, and each
comes back as the planted outcome; a second run sends nothing new; the judge freezes with
the run and another one is refused naming both; failures are stored, counted and retried
by the next run (a run whose every call failed exits 3 and leaves no judge frozen); the
summary shows sources, the endpoint, tokens and agreement.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from shadoweval.cli import app
from shadoweval.judge import PROMPT_SHA256_BY_FORMAT
from shadoweval.records import HumanLabel, JudgementSource, LabelValue, QualityOutcome
from shadoweval.serving import BackgroundServer
from shadoweval.simulation.mock_judge import JudgeFaults, JudgeState, create_judge_app
from shadoweval.simulation.mock_llm import FaultConfig
from shadoweval.stats.policy import DEFAULT_POLICY_FILE, load_policy
from shadoweval.storage import Database, PolicyAuditAction, Repository
from tests.judge.seed import (
    BASELINE,
    CANDIDATE,
    CHAT_CHANGED,
    CODE_CHANGED,
    EMAIL,
    RULE,
    RUN_ID,
    expected_outcome,
    seed_judge_run,
)

JUDGE_KEY = "judge-secret-key-42"
PREFLIGHT = 1
"""The judge preflight's one request (the first pair, once) before a judge run's pairs."""
BUDGET = load_policy(DEFAULT_POLICY_FILE).net_harm.max_judged_per_task_type


def cli(*args: object) -> Result:
    return CliRunner().invoke(app, [str(a) for a in args])


def flat(text: str) -> str:
    return " ".join(text.replace("│", " ").replace("┃", " ").split())


@pytest.fixture
def seeded_url(empty_url: str) -> str:
    with Database(empty_url) as db:
        db.upgrade()
        seed_judge_run(Repository(db))
    return empty_url


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'judge.db'}"
    with Database(url) as db:
        db.upgrade()
        seed_judge_run(Repository(db))
    return url


@pytest.fixture
def judge_server() -> Iterator[tuple[str, JudgeState]]:
    app_ = create_judge_app(RULE, model_name="mock-judge")
    with BackgroundServer(app_, start_timeout_s=60.0) as server:
        yield server.url, app_.state.judge


def configure(monkeypatch: pytest.MonkeyPatch, url: str, **more: str) -> None:
    monkeypatch.setenv("SHADOWEVAL_JUDGE__URL", url)
    monkeypatch.setenv("SHADOWEVAL_JUDGE__MODEL", more.pop("model", "mock-judge"))
    monkeypatch.setenv("SHADOWEVAL_JUDGE__API_KEY", JUDGE_KEY)
    monkeypatch.setenv("SHADOWEVAL_REPLAY__API_KEY", "replay-key-never-sent")
    for key, value in more.items():
        monkeypatch.setenv(f"SHADOWEVAL_JUDGE__{key.upper()}", value)


def stored(url: str) -> Any:
    with Database(url) as db:
        repo = Repository(db)
        return repo.list_judgements(RUN_ID, JudgementSource.JUDGE), repo.policy_audit(RUN_ID)


def test_judge_run_refuses_unless_sending_pairs_is_switched_on(
    sqlite_url: str, judge_server: tuple[str, JudgeState], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, state = judge_server
    configure(monkeypatch, url)
    result = cli("judge", "run", "--run-id", RUN_ID, "--database-url", sqlite_url)
    assert result.exit_code == 3
    err = flat(result.stderr)
    assert "sending pairs to a judge is off" in err
    assert "SHADOWEVAL_JUDGE__SEND_PAIRS=true" in err
    assert "--send-pairs" in err
    assert url in err
    assert state.requests == 0
    judgements, audit = stored(sqlite_url)
    assert judgements == []
    assert not [e for e in audit if e.action.value.startswith("judge_")]


def test_judge_run_sends_changed_pairs_and_stores_the_planted_outcomes(
    seeded_url: str, judge_server: tuple[str, JudgeState], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, state = judge_server
    configure(monkeypatch, url)
    result = cli("judge", "run", "--run-id", RUN_ID, "--send-pairs", "--database-url", seeded_url)
    assert result.exit_code == 0, result.output
    out = flat(result.stdout)
    changed = CHAT_CHANGED + CODE_CHANGED
    assert (
        f"judge 'mock-judge' at {url} (text answers): {changed} pairs sent "
        "(judge frozen with the run)"
    ) in out
    #           pairs changed before budget selected judged better tie worse order failed
    assert f"chat 18 12 0 {BUDGET} 12 12 6 0 6 0 0" in out
    assert f"code 5 5 0 {BUDGET} 5 5 3 0 2 0 0" in out
    assert state.requests == 2 * changed + PREFLIGHT

    judgements, audit = stored(seeded_url)
    assert len(judgements) == changed
    for judgement in judgements:
        index = int(judgement.exchange_id.removeprefix("ex-"))
        position = index if index < CHAT_CHANGED else index - CHAT_CHANGED - 6
        assert judgement.outcome == QualityOutcome(expected_outcome(position))
        assert judgement.stratum in (1, 2, 3)
        assert len(judgement.votes) == 2
    for headers, body in state.seen:
        assert headers["authorization"] == f"Bearer {JUDGE_KEY}"
        prompt = body["messages"][1]["content"]
        assert EMAIL not in prompt
        assert "[REDACTED:email]" in prompt
        assert "replay-key-never-sent" not in json.dumps(headers)
    assert [e.action for e in audit if e.action.value.startswith("judge_")] == [
        PolicyAuditAction.JUDGE_FROZEN
    ]

    again = cli("judge", "run", "--run-id", RUN_ID, "--send-pairs", "--database-url", seeded_url)
    assert again.exit_code == 0, again.output
    assert "0 pairs sent" in flat(again.stdout)
    assert f"chat 18 12 12 {BUDGET} 0 0 0 0 0 0 0" in flat(again.stdout)
    assert state.requests == 2 * changed + PREFLIGHT


def test_the_budget_is_stratified_and_counts_what_was_judged(
    sqlite_url: str, judge_server: tuple[str, JudgeState], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, _ = judge_server
    configure(monkeypatch, url, send_pairs="true")
    first = cli("judge", "run", "--run-id", RUN_ID, "--max-per-task-type", 4,
                "--database-url", sqlite_url, "--json")  # fmt: skip
    assert first.exit_code == 0, first.output
    report = json.loads(first.stdout)
    chat = next(t for t in report["task_types"] if t["task_type"] == "chat")
    assert (chat["changed"], chat["selected"], chat["judged"]) == (12, 4, 4)
    judgements, _ = stored(sqlite_url)
    strata = sorted(j.stratum for j in judgements if j.task_type == "chat")
    assert strata == [1, 2, 3, 3]  # strata of 3, 3 and 6 pairs: 1 + 1 + 2
    more = cli("judge", "run", "--run-id", RUN_ID, "--max-per-task-type", 8,
               "--database-url", sqlite_url, "--json")  # fmt: skip
    chat = next(t for t in json.loads(more.stdout)["task_types"] if t["task_type"] == "chat")
    assert (chat["already_judged"], chat["selected"]) == (4, 4)
    bad = cli("judge", "run", "--run-id", RUN_ID, "--max-per-task-type", 0,
              "--database-url", sqlite_url)  # fmt: skip
    assert bad.exit_code == 3
    assert "--max-per-task-type 0 must be >= 1" in bad.stderr


def test_another_judge_is_refused_naming_both(
    sqlite_url: str, judge_server: tuple[str, JudgeState], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, state = judge_server
    configure(monkeypatch, url, send_pairs="true")
    assert cli("judge", "run", "--run", RUN_ID, "--database-url", sqlite_url).exit_code == 0
    sent = state.requests
    configure(monkeypatch, url, model="bigger-judge", send_pairs="true", temperature="0.3")
    result = cli("judge", "run", "--run", RUN_ID, "--database-url", sqlite_url)
    assert result.exit_code == 3
    err = flat(result.stderr)
    assert f"run {RUN_ID} is judged by 'mock-judge' at {url}" in err
    assert "the configured judge 'bigger-judge'" in err
    assert "model 'mock-judge' → 'bigger-judge'" in err
    assert "temperature 0.0 → 0.3" in err
    assert state.requests == sent
    _, audit = stored(sqlite_url)
    refused = [e for e in audit if e.action is PolicyAuditAction.JUDGE_REFUSED]
    assert len(refused) == 1
    assert refused[0].detail["presented_judge"]["model"] == "bigger-judge"


def test_the_json_format_judges_and_another_format_is_refused(
    sqlite_url: str, judge_server: tuple[str, JudgeState], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run judged with ``SHADOWEVAL_JUDGE__RESPONSE_FORMAT=json_schema`` sends the schema
    and stores the planted outcomes; the summary names the format; the text format is
    then another judge (another prompt hash) and is refused, naming both formats."""
    url, state = judge_server
    configure(monkeypatch, url, send_pairs="true", response_format="json_schema")
    result = cli("judge", "run", "--run", RUN_ID, "--database-url", sqlite_url, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["judge"]["prompt_sha256"] == PROMPT_SHA256_BY_FORMAT["json_schema"]
    chat = next(t for t in report["task_types"] if t["task_type"] == "chat")
    assert (chat["judged"], chat["better"], chat["worse"], chat["failed"]) == (12, 6, 6, 0)
    assert state.requests == 2 * (CHAT_CHANGED + CODE_CHANGED) + PREFLIGHT
    assert all(body["response_format"]["type"] == "json_schema" for _, body in state.seen)
    summary = cli("judge", "summary", "--run", RUN_ID, "--database-url", sqlite_url, "--json")
    assert json.loads(summary.stdout)["judge_response_format"] == "json_schema"
    text = cli("judge", "summary", "--run", RUN_ID, "--database-url", sqlite_url)
    assert "json_schema answers" in flat(text.stdout)

    sent = state.requests
    configure(monkeypatch, url, send_pairs="true", response_format="text")
    refused = cli("judge", "run", "--run", RUN_ID, "--database-url", sqlite_url)
    assert refused.exit_code == 3
    err = flat(refused.stderr)
    assert "(json_schema answers) → " in err
    assert "(text answers)" in err
    assert state.requests == sent


def test_json_help_says_what_is_printed() -> None:
    run_help = flat(cli("judge", "run", "--help").stdout)
    summary_help = flat(cli("judge", "summary", "--help").stdout)
    assert "verdict" not in run_help.lower()
    assert "Print the judge run's report as JSON" in run_help
    assert "Print the judgement summary as JSON" in summary_help
    assert "verdict" not in summary_help.lower()


def test_failures_are_stored_counted_and_retried(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = create_judge_app(RULE, faults=JudgeFaults(bands=FaultConfig(error_rate=1.0)))
    with BackgroundServer(broken, start_timeout_s=60.0) as server:
        configure(monkeypatch, server.url, send_pairs="true")
        result = cli("judge", "run", "--run", RUN_ID, "--database-url", sqlite_url)
    # every judgement failed: the run produced nothing, says so (issue 13), and the judge
    # that answered nothing was not left frozen with the run.
    assert result.exit_code == 3, result.output
    assert f"chat 18 12 0 {BUDGET} 12 0 0 0 0 0 12" in flat(result.stdout)
    assert "HTTP 500: mock-judge injected fault" in flat(result.stderr)
    sent = CHAT_CHANGED + CODE_CHANGED
    assert f"judge run: every one of the {sent} judgements failed" in flat(result.stderr)
    assert "the judge was not frozen with the run" in flat(result.stderr)
    judgements, audit = stored(sqlite_url)
    assert len(judgements) == CHAT_CHANGED + CODE_CHANGED
    assert all(j.outcome is None for j in judgements)
    assert [e.action for e in audit if e.action.value.startswith("judge_")] == [
        PolicyAuditAction.JUDGE_FROZEN,
        PolicyAuditAction.JUDGE_RELEASED,
    ]

    healthy = create_judge_app(RULE)
    # The same endpoint identity is needed: serve the healthy judge on the same port.
    port = int(server.url.rsplit(":", 1)[1])
    with BackgroundServer(healthy, port=port, start_timeout_s=60.0):
        retry = cli("judge", "run", "--run", RUN_ID, "--database-url", sqlite_url)
    assert retry.exit_code == 0, retry.output
    assert f"chat 18 12 0 {BUDGET} 12 12 6 0 6 0 0" in flat(retry.stdout)
    judgements, _ = stored(sqlite_url)
    assert all(j.outcome is not None for j in judgements)


def test_a_judge_whose_every_call_failed_does_not_bind_the_run(
    sqlite_url: str, judge_server: tuple[str, JudgeState], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A typo in the judge's model name (every call refused) must not freeze that name with
    the run: the corrected judge is accepted, not refused as "another judge"."""
    url, state = judge_server
    broken = create_judge_app(RULE, faults=JudgeFaults(bands=FaultConfig(error_rate=1.0)))
    with BackgroundServer(broken, start_timeout_s=60.0) as server:
        configure(monkeypatch, server.url, send_pairs="true", model="mock-judgee")
        failed = cli("judge", "run", "--run", RUN_ID, "--database-url", sqlite_url, "--json")
    assert failed.exit_code == 3
    assert json.loads(failed.stdout)["released"] is True
    configure(monkeypatch, url, send_pairs="true")
    fixed = cli("judge", "run", "--run", RUN_ID, "--database-url", sqlite_url)
    assert fixed.exit_code == 0, fixed.output
    assert "(judge frozen with the run)" in flat(fixed.stdout)
    assert state.requests == 2 * (CHAT_CHANGED + CODE_CHANGED) + PREFLIGHT
    judgements, audit = stored(sqlite_url)
    assert all(j.outcome is not None for j in judgements)
    assert [e.action for e in audit if e.action.value.startswith("judge_")] == [
        PolicyAuditAction.JUDGE_FROZEN,
        PolicyAuditAction.JUDGE_RELEASED,
        PolicyAuditAction.JUDGE_FROZEN,
    ]


def test_a_run_without_changed_pairs_has_nothing_to_judge_and_exits_3(
    sqlite_url: str, judge_server: tuple[str, JudgeState], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 13: ``judge run`` exited 0 when nothing was done."""
    url, state = judge_server
    configure(monkeypatch, url, send_pairs="true")
    with Database(sqlite_url) as db:
        Repository(db).create_run(
            run_id="empty-run", name="nothing scored", baseline=BASELINE, candidate=CANDIDATE,
            policy_hash="0" * 64, policy_yaml="version: 1\n",
        )  # fmt: skip
    result = cli("judge", "run", "--run", "empty-run", "--database-url", sqlite_url)
    assert result.exit_code == 3, result.output
    assert "judge run: nothing to judge: run empty-run has 0 scored pairs" in flat(result.stderr)
    assert "Traceback" not in result.output
    as_json = cli("judge", "run", "--run", "empty-run", "--database-url", sqlite_url, "--json")
    assert as_json.exit_code == 3
    assert json.loads(as_json.stdout)["run_id"] == "empty-run"
    assert state.requests == 0


def test_summary_shows_sources_endpoint_tokens_and_agreement(
    sqlite_url: str, judge_server: tuple[str, JudgeState], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, _ = judge_server
    configure(monkeypatch, url, send_pairs="true")
    assert cli("judge", "run", "--run", RUN_ID, "--database-url", sqlite_url).exit_code == 0
    with Database(sqlite_url) as db:
        Repository(db).save_labels(
            HumanLabel(
                run_id=RUN_ID,
                exchange_id=f"ex-{n:04d}",
                task_type="chat",
                label=LabelValue.CANDIDATE_BETTER if n % 2 == 0 else LabelValue.SAME,
                labeller="ana",
                source="import",
            )
            for n in range(6)
        )
    result = cli("judge", "summary", "--run", RUN_ID, "--database-url", sqlite_url, "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["endpoint"] == url
    assert summary["judge"]["model"] == "mock-judge"
    assert summary["sources"]["resolved"] == {"judge": 11, "human": 6, "reference": 0, "failed": 0}
    assert summary["judge_tokens"]["prompt"] > 0
    assert summary["agreement"]["n"] == 6
    # Judge: better, worse, better, worse, …; humans: better, same, better, same, …
    assert summary["agreement"]["table"] == [[3, 0, 0], [0, 0, 0], [0, 3, 0]]
    chat = summary["per_task_type"]["chat"]
    assert (chat["human"], chat["judge"]) == (6, 6)
    text = cli("judge", "summary", "--run", RUN_ID, "--database-url", sqlite_url)
    assert text.exit_code == 0, text.output
    out = flat(text.stdout)
    assert f"judge 'mock-judge' at {url}" in out
    assert "judge-human agreement on 6 pairs" in out
    # Judge quality (issue 31): the judge agrees with the labels on the even pairs (3 of 6);
    # the mock judge answers alike in both orders: no flip, half the votes for the first.
    quality = summary["judge_quality"]["per_task_type"]["chat"]
    assert (quality["agreement"]["count"], quality["agreement"]["n"]) == (3, 6)
    assert (quality["flip"]["count"], quality["flip"]["n"]) == (0, quality["judged"])
    first = quality["first_position"]
    assert (first["count"], first["n"]) == (quality["judged"], 2 * quality["judged"])
    assert quality["standing"]["votes"] is True
    assert quality["standing"]["read"] == "not_read"  # 6 labelled pairs < 30
    assert "judge quality (95% Wilson intervals" in out
    assert "50% of 6 (19–81%)" in out
    assert "yes (floor not read)" in out


def test_unknown_run_exits_3(sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    configure(monkeypatch, "http://127.0.0.1:9", send_pairs="true")
    for command in ("run", "summary"):
        result = cli("judge", command, "--run", "nope", "--database-url", sqlite_url)
        assert result.exit_code == 3
        assert "--run 'nope': run not found" in result.stderr


def test_missing_judge_url_names_the_variable(sqlite_url: str) -> None:
    result = cli("judge", "run", "--run", RUN_ID, "--send-pairs", "--database-url", sqlite_url)
    assert result.exit_code == 3
    assert "set SHADOWEVAL_JUDGE__URL" in result.stderr


def test_evaluate_with_judge_refuses_before_replaying_unless_sending_is_on(
    tmp_path: Path, judge_server: tuple[str, JudgeState], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``evaluate --judge`` checks the judge settings first: without --send-pairs (or the
    setting) it exits 3 naming the setting, and nothing was replayed or sent."""
    url, state = judge_server
    configure(monkeypatch, url)
    log = tmp_path / "capture"
    log.mkdir()
    db = tmp_path / "e.db"
    result = cli(
        "evaluate",
        "--capture-log",
        log,
        "--candidate-url",
        "http://127.0.0.1:9",
        "--database-url",
        f"sqlite:///{db}",
        "--judge",
        "--no-progress",
    )
    assert result.exit_code == 3, result.output
    assert "SHADOWEVAL_JUDGE__SEND_PAIRS=true" in flat(result.stderr)
    assert state.requests == 0
    assert not db.exists()
