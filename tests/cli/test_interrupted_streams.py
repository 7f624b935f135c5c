"""Interrupted is not empty, cut is not harm (issue 29, item 8), end to end through
``evaluate``: the capture log is the demo workload's baseline (streamed), the candidate is
mock-llm (a test double) serving the baseline's *own* answers under real uvicorn, in
llama.cpp's modes (:class:`~shadoweval.simulation.mock_llm.StreamCuts`).

* A server that cuts a running stream when a new request arrives (llama-cpp-python's
  ``interrupt_requests``, on by default there) at the default concurrency: before the rule,
  ROLLBACK on empty answers for an identical model; now HOLD on infrastructure, the reason
  naming the interrupted streams and saying to lower ``--concurrency``. At
  ``--concurrency 1`` nothing is cut and the identical model is promoted.
* A context window too small (llama.cpp ``n_ctx``): HTTP 500s naming the context window
  and streams cut after content. The reasons name the candidate's context length, and the
  decision is the one the policy names (``infra_error_rate.context_length``): HOLD by
  default, ROLLBACK under ``rollback``, never a decision its reasons contradict.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from shadoweval.cli.exit_codes import EXIT_CODES
from shadoweval.records import CONTEXT_LENGTH_WORDS, INTERRUPTED_WORDS, Decision, Verdict
from shadoweval.serving import BackgroundServer
from shadoweval.simulation.mock_llm import FaultConfig, StreamCuts, TableLatency, create_app
from shadoweval.simulation.mock_llm.cuts import prompt_pieces
from tests.cli.test_pipeline_commands import POLICY, Workload, evaluate, workload

__all__ = ["workload"]  # the module-scoped fixture, shared with the pipeline tests


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'results.db'}"


@pytest.fixture
def serve_cuts(workload: Workload) -> Iterator[Any]:
    """``serve_cuts(cuts)`` → URL of mock-llm serving the baseline's own answers."""
    with ExitStack() as stack:

        def start(cuts: StreamCuts) -> str:
            mock = create_app(
                workload.baseline_rows,
                latency=TableLatency(),
                faults=FaultConfig(),
                seed=1,
                model_name="candidate-v2",
                time_scale=0.05,
                cuts=cuts,
            )
            return stack.enter_context(BackgroundServer(mock)).url

        yield start


def run(workload: Workload, url: str, db: str, tmp_path: Path, *extra: object) -> dict[str, Any]:
    report_path = tmp_path / "report.json"
    result = evaluate(workload, url, db, "--report", report_path, *extra)
    report: dict[str, Any] = json.loads(report_path.read_text(encoding="utf-8"))
    decision = Decision(report["verdict"]["decision"])
    assert result.exit_code == EXIT_CODES[decision], result.stderr
    report["stderr"] = " ".join(result.stderr.split())
    return report


def reasons(report: dict[str, Any]) -> list[str]:
    return list(Verdict.model_validate(report["verdict"]).reasons)


def test_an_interrupting_server_holds_an_identical_model_and_says_to_lower_concurrency(
    workload: Workload, serve_cuts: Any, db: str, tmp_path: Path
) -> None:
    url = serve_cuts(StreamCuts(interrupt_running=True))
    report = run(workload, url, db, tmp_path, "--concurrency", "16")
    said = reasons(report)
    assert report["verdict"]["decision"] == Decision.HOLD.value, said
    assert said[0].startswith("infrastructure:"), said
    assert report["replay"]["errors"].get("interrupted", 0) > 0
    assert (
        report["replay"]["interrupted"]["candidate"] >= 0.2 * report["replay"]["sent"]["candidate"]
    )
    named = [r for r in said if r.startswith(INTERRUPTED_WORDS)]
    assert named, said
    assert "lower --concurrency (to 1)" in named[0]
    assert "lower --concurrency (to 1)" in report["stderr"]  # the replay's warning
    verdict = Verdict.model_validate(report["verdict"])
    failed = {(c.task_type, c.metric) for c in verdict.checks if c.outcome.value == "fail"}
    assert not any(metric == "error_rate" for _, metric in failed), failed  # never "empty"


def test_the_same_server_at_concurrency_one_promotes_the_identical_model(
    workload: Workload, serve_cuts: Any, db: str, tmp_path: Path
) -> None:
    url = serve_cuts(StreamCuts(interrupt_running=True))
    report = run(workload, url, db, tmp_path, "--concurrency", "1")
    assert report["replay"]["interrupted"] == {}
    assert report["verdict"]["decision"] == Decision.PROMOTE.value, reasons(report)


def context_tokens(workload: Workload) -> int:
    """A window that refuses the longer half of the prompts and cuts the rest's answers."""
    lengths = sorted(prompt_pieces(r.messages) for r in workload.baseline_rows)
    return lengths[len(lengths) // 2] + 3


@pytest.mark.parametrize("choice", ["hold", "rollback"])
def test_a_context_window_too_small_is_named_and_decided_as_the_policy_says(
    choice: str, workload: Workload, serve_cuts: Any, db: str, tmp_path: Path
) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        POLICY.replace(
            "infra_error_rate:\n  margin: 0.1\n",
            f"infra_error_rate:\n  margin: 0.1\n  context_length: {choice}\n",
        ),
        encoding="utf-8",
    )
    url = serve_cuts(StreamCuts(context_tokens=context_tokens(workload)))
    report = run(
        Workload(workload.capture, workload.baseline_rows, workload.candidate_rows, policy),
        url,
        db,
        tmp_path,
    )
    said = reasons(report)
    errors = report["replay"]["errors"]
    assert errors.get("http_status", 0) > 0
    assert errors.get("interrupted", 0) > 0
    named = [r for r in said if r.startswith(CONTEXT_LENGTH_WORDS)]
    assert len(named) == 1, said
    assert f"infra_error_rate.context_length is {choice}" in named[0]
    expected = Decision.HOLD if choice == "hold" else Decision.ROLLBACK
    assert report["verdict"]["decision"] == expected.value, said
    if expected is Decision.ROLLBACK:
        assert not any("never ROLLBACK" in r for r in said), said
        assert not any(r.startswith("infrastructure:") for r in said), said
    else:
        assert said[0].startswith("infrastructure:"), said
