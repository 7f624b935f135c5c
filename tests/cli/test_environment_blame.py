"""Environment versus candidate (issue 29, item 1), end to end through ``evaluate``.

The capture log is the demo workload's baseline (4 task types × 40 chat requests, seeded);
the candidate is mock-llm (a test double) serving the baseline's own answers under real
uvicorn, on SQLite. The environment's mistakes enter only as what a real deployment would
put in front of the server: a base URL ending in ``/v1``, an auth gate that refuses the
key, and a stale server on the port that rejects a share of the requests (an ASGI wrapper
around the real mock, the tests' seam).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from shadoweval.capture.table_import import import_table
from shadoweval.cli import app
from shadoweval.cli.exit_codes import EXIT_CODES, EXIT_ERROR
from shadoweval.records import POOLED, Decision, Verdict
from shadoweval.serving import BackgroundServer
from shadoweval.simulation.mock_llm import FaultConfig, NoLatency, create_app
from shadoweval.simulation.workload import DEMO_MAPPING, TASK_TYPES, WorkloadSpec, write_workload
from shadoweval.tables import RecordedRow, TableMapping, load_recorded_rows

PER_TASK_TYPE = 40
PAIRS = PER_TASK_TYPE * len(TASK_TYPES)
POLICY = f"""\
min_pairs_per_task_type: 30
min_pairs_pooled: 30
error_rate: {{margin: 0.1}}
infra_error_rate: {{margin: 0.1}}
format_parse: {{margin: 0.1}}
harm: {{margin: 0.1}}
tool_calls: {{margin: 0.1}}
latency: {{metrics: []}}
sequential: {{first_checkpoint: {PAIRS}, n_max: {PAIRS}}}
"""


@dataclass(frozen=True)
class Workload:
    capture: Path
    rows: list[RecordedRow]


@pytest.fixture(scope="module")
def workload(tmp_path_factory: pytest.TempPathFactory) -> Workload:
    root = tmp_path_factory.mktemp("environment")
    mapping = TableMapping(**DEMO_MAPPING)
    baseline, _ = write_workload(root / "tables", WorkloadSpec(per_task_type=PER_TASK_TYPE, seed=3))
    capture = root / "capture"
    import_table(baseline, out=capture, mapping=mapping, stream=True)
    return Workload(capture, load_recorded_rows(baseline, mapping).rows)


def _mock(workload: Workload) -> Any:
    return create_app(
        workload.rows, latency=NoLatency(), faults=FaultConfig(), seed=1, model_name="candidate-v2"
    )


async def _reply(send: Any, status: int, body: bytes) -> None:
    headers = [(b"content-type", b"application/json")]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


@dataclass
class KeyGate:
    """An auth gate in front of the real mock: 401 unless ``Authorization: Bearer <key>``."""

    app: Any
    key: str

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        headers = dict(scope.get("headers") or []) if scope["type"] == "http" else {}
        if (
            scope["type"] == "http"
            and headers.get(b"authorization") != f"Bearer {self.key}".encode()
        ):
            body = (
                b'{"error": {"message": "Incorrect API key provided", "code": "invalid_api_key"}}'
            )
            await _reply(send, 401, body)
            return
        await self.app(scope, receive, send)


def stale(exchange_id: str) -> bool:
    """The deterministic ~40% of exchanges a stale server on the port rejects."""
    return hashlib.sha256(exchange_id.encode()).digest()[0] < 102


@dataclass
class StaleServer:
    """A stale server left on the port: 400 for the :func:`stale` exchanges (by the
    replay's ``x-shadow-eval-exchange-id`` header), the real mock for the others."""

    app: Any

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        headers = dict(scope.get("headers") or []) if scope["type"] == "http" else {}
        exchange_id = headers.get(b"x-shadow-eval-exchange-id", b"").decode()
        if exchange_id and stale(exchange_id):
            await _reply(send, 400, b'{"error": {"message": "stale build: bad request"}}')
            return
        await self.app(scope, receive, send)


def share_of(exchange_id: str, salt: str) -> float:
    """A deterministic value in [0, 1) per exchange (which requests a wrapper rejects)."""
    return hashlib.sha256(f"{salt}:{exchange_id}".encode()).digest()[0] / 256


UNSUPPORTED = (
    b'{"error": {"message": "model \'candidate-v2\' does not support response_format", '
    b'"type": "invalid_request_error"}}'
)


@dataclass
class Rejecting:
    """A server in front of the real mock that answers HTTP 400 to the ``share`` of the
    exchanges picked by :func:`share_of`: with one body (``varied=False``: a configuration
    error, e.g. an unsupported parameter every request carries) or with a body of its own
    per request (``varied=True``: the model's own rejections of a few requests)."""

    app: Any
    share: float
    varied: bool

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        headers = dict(scope.get("headers") or []) if scope["type"] == "http" else {}
        exchange_id = headers.get(b"x-shadow-eval-exchange-id", b"").decode()
        if exchange_id and share_of(exchange_id, "rejecting") < self.share:
            body = UNSUPPORTED
            if self.varied:
                body = json.dumps(
                    {"error": {"message": f"prompt {exchange_id} breaks rule {exchange_id[-3:]}"}}
                ).encode()
            await _reply(send, 400, body)
            return
        await self.app(scope, receive, send)


@pytest.fixture(scope="module")
def servers(workload: Workload) -> Iterator[dict[str, str]]:
    with ExitStack() as stack:
        yield {
            "mock": stack.enter_context(BackgroundServer(_mock(workload))).url,
            "keyed": stack.enter_context(BackgroundServer(KeyGate(_mock(workload), "right"))).url,
            "stale": stack.enter_context(BackgroundServer(StaleServer(_mock(workload)))).url,
            "stale_replica": stack.enter_context(
                BackgroundServer(StaleServer(_mock(workload)))
            ).url,
            "config_400": stack.enter_context(
                BackgroundServer(Rejecting(_mock(workload), share=0.8, varied=False))
            ).url,
            "model_400": stack.enter_context(
                BackgroundServer(Rejecting(_mock(workload), share=0.08, varied=True))
            ).url,
        }


def cli(*args: object, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(app, [str(a) for a in args], env=env)


def evaluate(
    workload: Workload, url: str, tmp_path: Path, *extra: object, env: dict[str, str] | None = None
) -> Result:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY, encoding="utf-8")
    return cli(
        "evaluate", "--capture-log", workload.capture, "--candidate-url", url,
        "--candidate-model", "candidate-v2",
        "--database-url", f"sqlite:///{tmp_path / 'r.db'}", "--policy", policy,
        "--encoder", "hashing", "--no-progress", "--report", tmp_path / "report.json", *extra,
        env=env,
    )  # fmt: skip


def report(tmp_path: Path) -> dict[str, Any]:
    return json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def flat(text: str) -> str:
    return " ".join(text.split())


def test_a_base_url_ending_in_v1_stops_before_the_replay_naming_the_doubled_path(
    workload: Workload, servers: dict[str, str], tmp_path: Path
) -> None:
    result = evaluate(workload, servers["mock"] + "/v1", tmp_path)
    assert result.exit_code == EXIT_ERROR, result.stdout
    err = flat(result.stderr)
    assert f"POST {servers['mock']}/v1/v1/chat/completions → HTTP 404" in err
    assert "/v1 twice" in err
    assert not (tmp_path / "report.json").exists()


def test_a_wrong_api_key_stops_before_the_replay_naming_401(
    workload: Workload, servers: dict[str, str], tmp_path: Path
) -> None:
    result = evaluate(
        workload, servers["keyed"], tmp_path, env={"SHADOWEVAL_REPLAY__API_KEY": "wrong"}
    )
    assert result.exit_code == EXIT_ERROR, result.stdout
    err = flat(result.stderr)
    assert f"POST {servers['keyed']}/v1/chat/completions → HTTP 401" in err
    assert "Incorrect API key provided" in err


def test_connection_refused_stops_before_the_replay(workload: Workload, tmp_path: Path) -> None:
    with BackgroundServer(_mock(workload)) as gone:
        url = gone.url
    result = evaluate(workload, url, tmp_path, "--timeout", "5")
    assert result.exit_code == EXIT_ERROR, result.stdout
    assert f"POST {url}/v1/chat/completions → connect" in flat(result.stderr)


def test_without_preflight_the_misconfigured_url_holds_and_a_fixed_rerun_replays_it(
    workload: Workload, servers: dict[str, str], tmp_path: Path
) -> None:
    wrong = evaluate(
        workload, servers["mock"] + "/v1", tmp_path, "--no-preflight", "--run-id", "env-run"
    )
    verdict = Verdict.model_validate(report(tmp_path)["verdict"])
    assert verdict.decision is Decision.HOLD, verdict.reasons
    assert wrong.exit_code == EXIT_CODES[Decision.HOLD]
    lead = verdict.reasons[0]
    assert lead.startswith("infrastructure: the candidate's requests failed for reasons of the")
    assert f"HTTP 404 on {PAIRS} pairs" in lead
    assert "/v1/v1/chat/completions" in lead
    assert "/v1 twice" in lead
    assert "prompt_not_recorded" not in lead  # the path was wrong, not the recording
    assert not [c for c in verdict.checks if c.metric == "error_rate" and c.outcome == "fail"]

    fixed = evaluate(workload, servers["mock"], tmp_path, "--run-id", "env-run")
    replay = report(tmp_path)["replay"]
    assert replay["retried"] == {"candidate": PAIRS}
    assert replay["errors"] == {}
    verdict = Verdict.model_validate(report(tmp_path)["verdict"])
    assert not any("environment" in r for r in verdict.reasons), verdict.reasons
    assert verdict.coverage.environment_failures == ()
    assert verdict.decision is Decision.PROMOTE, verdict.reasons
    assert fixed.exit_code == EXIT_CODES[Decision.PROMOTE]


def test_failures_the_replica_shares_hold_instead_of_rolling_back(
    workload: Workload, servers: dict[str, str], tmp_path: Path
) -> None:
    result = evaluate(
        workload, servers["stale"], tmp_path,
        "--baseline-repeat-url", servers["stale_replica"], "--baseline-repeat-share", "1.0",
    )  # fmt: skip
    verdict = Verdict.model_validate(report(tmp_path)["verdict"])
    assert verdict.decision is Decision.HOLD, verdict.reasons
    assert result.exit_code == EXIT_CODES[Decision.HOLD]
    (failure,) = verdict.coverage.environment_failures
    assert failure.cause == "HTTP 400"
    assert failure.count == failure.shared > PAIRS // 4
    assert "stale build: bad request" in failure.example_detail
    assert (
        f"HTTP 400 on {failure.count} pairs, {failure.shared} of them failed on the "
        in (verdict.reasons[0])
    )


def test_the_same_400_body_on_most_requests_holds_naming_status_count_and_example(
    workload: Workload, servers: dict[str, str], tmp_path: Path
) -> None:
    """A candidate that rejects most requests with one 400 body (a parameter it does not
    support: a configuration error) is the environment's: HOLD, never ROLLBACK."""
    result = evaluate(workload, servers["config_400"], tmp_path)
    rejected = report(tmp_path)["replay"]["errors"]
    verdict = Verdict.model_validate(report(tmp_path)["verdict"])
    assert verdict.decision is Decision.HOLD, verdict.reasons
    assert result.exit_code == EXIT_CODES[Decision.HOLD]
    (failure,) = verdict.coverage.environment_failures
    assert failure.cause == "HTTP 400"
    assert 2 * failure.count > PAIRS
    assert failure.shared == 0
    assert "does not support response_format" in failure.example_detail
    lead = verdict.reasons[0]
    assert lead.startswith("infrastructure: the candidate's requests failed for reasons of the")
    assert f"HTTP 400 on {failure.count} pairs, e.g. exchange {failure.example_exchange_id}" in lead
    assert "does not support response_format" in lead
    assert not [c for c in verdict.checks if c.metric == "error_rate" and c.outcome == "fail"]
    assert rejected, "the replay counted the rejections"


def test_a_few_varied_400s_stay_the_models_errors(
    workload: Workload, servers: dict[str, str], tmp_path: Path
) -> None:
    """A candidate that rejects a few requests, each with its own message, is rejecting
    those prompts: the model's errors, counted in error_rate, not the environment's."""
    evaluate(workload, servers["model_400"], tmp_path)
    verdict = Verdict.model_validate(report(tmp_path)["verdict"])
    assert verdict.coverage.environment_failures == ()
    assert not any("reasons of the environment" in r for r in verdict.reasons), verdict.reasons
    rejected = report(tmp_path)["replay"]["errors"]["http_status"]
    assert 3 <= rejected < PAIRS // 4
    pooled = {c.metric: c for c in verdict.checks if c.task_type == POOLED}
    assert pooled["error_rate"].n == PAIRS
    assert pooled["error_rate"].estimate == pytest.approx(rejected / PAIRS)  # the model's
    assert pooled["infra_error_rate"].estimate == 0.0
