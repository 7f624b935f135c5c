"""The judge's preflight (issue 29, item 1): ``shadow-eval judge run`` sends one real judge
request before the run's pairs, against the mock judge on a real socket.

A judge URL with ``/v1`` twice (404), a wrong judge key (the mock judge's 401) and a judge
that is not there stop the run with exit 3 naming the URL requested, the status and the
body's first bytes, in the replay preflight's words; nothing is judged or stored, and the
judge is not left frozen with the run. A transient failure (HTTP 500) is a warning and the
run goes on; ``SHADOWEVAL_JUDGE__PREFLIGHT=false`` skips the request.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from shadoweval.cli import app
from shadoweval.records import JudgementSource
from shadoweval.serving import BackgroundServer
from shadoweval.simulation.mock_judge import JudgeFaults, JudgeState, create_judge_app
from shadoweval.simulation.mock_llm import FaultConfig
from shadoweval.storage import Database, PolicyAuditAction, Repository
from tests.judge.seed import CHAT_CHANGED, CODE_CHANGED, RULE, RUN_ID, seed_judge_run

KEY = "judge-key-right"
SENT = CHAT_CHANGED + CODE_CHANGED


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'judge.db'}"
    with Database(url) as db:
        db.upgrade()
        seed_judge_run(Repository(db))
    return url


@pytest.fixture
def keyed_judge() -> Iterator[tuple[str, JudgeState]]:
    app_ = create_judge_app(RULE, model_name="mock-judge", api_key=KEY)
    with BackgroundServer(app_, start_timeout_s=60.0) as server:
        yield server.url, app_.state.judge


def judge_run(url: str, database_url: str, key: str = KEY, *, preflight: bool = True) -> Result:
    env = {
        "SHADOWEVAL_JUDGE__URL": url,
        "SHADOWEVAL_JUDGE__MODEL": "mock-judge",
        "SHADOWEVAL_JUDGE__API_KEY": key,
        "SHADOWEVAL_JUDGE__SEND_PAIRS": "true",
        "SHADOWEVAL_JUDGE__RETRIES": "0",
        "SHADOWEVAL_JUDGE__PREFLIGHT": str(preflight).lower(),
    }
    args = ["judge", "run", "--run-id", RUN_ID, "--database-url", database_url]
    return CliRunner().invoke(app, args, env=env)


def flat(text: str) -> str:
    return " ".join(text.split())


def nothing_judged_nor_frozen(database_url: str) -> None:
    with Database(database_url) as db:
        repo = Repository(db)
        assert repo.list_judgements(RUN_ID, JudgementSource.JUDGE) == []
        assert repo.run_judge(RUN_ID) is None
        actions = [e.action for e in repo.policy_audit(RUN_ID)]
    assert [a for a in actions if a.value.startswith("judge_")] == [
        PolicyAuditAction.JUDGE_FROZEN,
        PolicyAuditAction.JUDGE_RELEASED,
    ]


def test_a_judge_url_with_v1_twice_stops_naming_the_doubled_path_and_404(
    sqlite_url: str, keyed_judge: tuple[str, JudgeState]
) -> None:
    url, state = keyed_judge
    result = judge_run(f"{url}/v1/v1", sqlite_url)
    assert result.exit_code == 3, result.output
    err = flat(result.stderr)
    assert (
        f"preflight: the judge target failed one real request before judging: "
        f"POST {url}/v1/v1/chat/completions → HTTP 404: 'Not Found'"
    ) in err
    assert "likely cause: the path has /v1 twice" in err
    assert "Nothing was judged; fix SHADOWEVAL_JUDGE__URL" in err
    assert state.requests == 0
    nothing_judged_nor_frozen(sqlite_url)


def test_a_wrong_judge_key_stops_naming_401_and_the_body(
    sqlite_url: str, keyed_judge: tuple[str, JudgeState]
) -> None:
    url, state = keyed_judge
    result = judge_run(url, sqlite_url, key="judge-key-wrong")
    assert result.exit_code == 3, result.output
    err = flat(result.stderr)
    assert f"POST {url}/v1/chat/completions → HTTP 401: " in err
    assert "Incorrect API key provided" in err
    assert "invalid_api_key" in err
    assert "judge-key-wrong" not in err
    assert len(state.seen) == 1  # the preflight only: no pair was sent after it
    nothing_judged_nor_frozen(sqlite_url)

    fixed = judge_run(url, sqlite_url)
    assert fixed.exit_code == 0, fixed.output
    assert f"{SENT} pairs sent (judge frozen with the run)" in flat(fixed.stdout)
    assert state.requests == 2 * SENT + 1  # the preflight, then both orders of each pair


def test_a_judge_that_is_not_there_stops_naming_the_connection_error(sqlite_url: str) -> None:
    with BackgroundServer(create_judge_app(RULE), start_timeout_s=60.0) as gone:
        url = gone.url
    result = judge_run(url, sqlite_url)
    assert result.exit_code == 3, result.output
    assert f"POST {url}/v1/chat/completions → connect: " in flat(result.stderr)
    nothing_judged_nor_frozen(sqlite_url)


def test_a_transient_failure_warns_and_the_run_goes_on(sqlite_url: str) -> None:
    broken = create_judge_app(RULE, faults=JudgeFaults(bands=FaultConfig(error_rate=1.0)))
    with BackgroundServer(broken, start_timeout_s=60.0) as server:
        result = judge_run(server.url, sqlite_url)
        state: JudgeState = broken.state.judge
        assert state.requests == 2 * SENT + 1
    err = flat(result.stderr)
    assert (
        f"warning: preflight: the judge target failed one real request before judging: "
        f"POST {server.url}/v1/chat/completions → HTTP 500: "
    ) in err
    assert "Judging anyway: failed judgements are kept and retried" in err
    assert f"every one of the {SENT} judgements failed" in err


def test_without_preflight_a_wrong_key_fails_every_judgement_instead(
    sqlite_url: str, keyed_judge: tuple[str, JudgeState]
) -> None:
    url, state = keyed_judge
    result = judge_run(url, sqlite_url, key="judge-key-wrong", preflight=False)
    assert result.exit_code == 3, result.output
    err = flat(result.stderr)
    assert "preflight" not in err
    assert f"every one of the {SENT} judgements failed" in err
    assert "HTTP 401: Incorrect API key provided" in err
    assert len(state.seen) == 2 * SENT


def test_evaluate_with_a_wrong_judge_url_stops_before_replaying(
    tmp_path: Path, keyed_judge: tuple[str, JudgeState]
) -> None:
    """``evaluate --judge`` preflights the judge before the replay: measured on main, a
    judge URL with /v1 twice was found only after the whole replay and compare had run."""
    url, state = keyed_judge
    log = tmp_path / "capture"
    log.mkdir()
    db = tmp_path / "e.db"
    env = {
        "SHADOWEVAL_JUDGE__URL": f"{url}/v1/v1",
        "SHADOWEVAL_JUDGE__MODEL": "mock-judge",
        "SHADOWEVAL_JUDGE__API_KEY": KEY,
        "SHADOWEVAL_JUDGE__SEND_PAIRS": "true",
    }
    args = [
        "evaluate", "--capture-log", str(log), "--candidate-url", "http://127.0.0.1:9",
        "--database-url", f"sqlite:///{db}", "--judge", "--no-progress",
    ]  # fmt: skip
    result = CliRunner().invoke(app, args, env=env)
    assert result.exit_code == 3, result.output
    err = flat(result.stderr)
    assert f"POST {url}/v1/v1/chat/completions → HTTP 404" in err
    assert "likely cause: the path has /v1 twice" in err
    assert state.requests == 0
    assert not db.exists()  # nothing replayed, no run created
