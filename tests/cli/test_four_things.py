"""Name the four things (issue 29 item 9): a model swap changes weights, tokenizer, chat
template and sampling defaults; the verdict names the likely cause when one of the three
that are not the weights is at work.

End to end on the real mock-llm: the candidate serves the baseline's recorded rows with
what a wrong chat template or a small token budget does to them (prompt tokens ×1.6 on the
same requests, ``<|im_start|>`` leaks, empty answers; ``finish_reason: length``), and
``evaluate`` must lead the deciding reason with that cause. A deterministic replica (8e)
is named as such, never "a recording".
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

from shadoweval.records import Decision
from shadoweval.tables import RecordedRow
from tests.cli.test_pipeline_commands import (
    ServeModel,
    Workload,
    db,
    evaluate,
    serve_model,
    workload,
)

__all__ = ["db", "serve_model", "workload"]  # fixtures shared with test_pipeline_commands


def _prompt_scaled(row: RecordedRow, factor: float) -> RecordedRow:
    assert row.prompt_tokens is not None  # the demo workload records them
    return dataclasses.replace(row, prompt_tokens=max(1, round(row.prompt_tokens * factor)))


def wrong_template(rows: list[RecordedRow]) -> list[RecordedRow]:
    """What a ChatML template on a model trained with another does: the prompt costs ×1.6
    tokens, every third answer is empty, every eighth starts with a leaked marker."""
    out = []
    for i, row in enumerate(rows):
        row = _prompt_scaled(row, 1.6)
        if i % 3 == 0:
            row = dataclasses.replace(row, output_text="", tool_calls=())
        elif i % 8 == 1 and row.output_text:
            row = dataclasses.replace(row, output_text="<|im_start|>assistant\n" + row.output_text)
        out.append(row)
    return out


def run(workload: Workload, url: str, db: str, tmp_path: Path, *extra: object) -> dict[str, Any]:
    report_path = tmp_path / "report.json"
    result = evaluate(workload, url, db, "--report", report_path, *extra)
    report: dict[str, Any] = json.loads(report_path.read_text(encoding="utf-8"))
    assert result.exit_code in (0, 1, 2), result.stderr
    return report


def test_a_wrong_chat_template_is_named_before_the_empty_answers(
    workload: Workload, serve_model: ServeModel, db: str, tmp_path: Path
) -> None:
    url = serve_model(wrong_template(workload.baseline_rows))
    verdict = run(workload, url, db, tmp_path)["verdict"]
    assert verdict["decision"] == Decision.ROLLBACK.value, verdict["reasons"]
    first = verdict["reasons"][0]
    # ×1.6 per row, rounded to whole tokens: the median is ×1.58.
    assert re.match(
        r"likely the chat template \(prompt tokens ×1\.[56]\d on identical requests, "
        r"\d+ marker leaks\): ",
        first,
    ), first
    # … then what failed, as before.
    assert "error_rate" in first or "harm_" in first
    notes = [r for r in verdict["reasons"] if r.startswith("cause attribution, pooled:")]
    assert len(notes) == 1
    assert "the chat template" in notes[0]


def test_a_tokenizer_change_alone_is_reported_not_blamed(
    workload: Workload, serve_model: ServeModel, db: str, tmp_path: Path
) -> None:
    url = serve_model([_prompt_scaled(r, 0.84) for r in workload.baseline_rows])
    verdict = run(workload, url, db, tmp_path)["verdict"]
    assert verdict["decision"] == Decision.PROMOTE.value, verdict["reasons"]
    notes = [r for r in verdict["reasons"] if r.startswith("cause attribution, pooled:")]
    assert len(notes) == 1
    assert (
        "the tokenizer or the chat template (prompt tokens ×0.84 on identical requests)"
        in (notes[0])
    )
    assert not any(r.startswith("likely ") for r in verdict["reasons"])


def test_answers_cut_at_the_token_budget_name_the_budget(
    workload: Workload, serve_model: ServeModel, db: str, tmp_path: Path
) -> None:
    rows = [
        dataclasses.replace(r, finish_reason="length") if i % 2 == 0 and r.output_text else r
        for i, r in enumerate(workload.baseline_rows)
    ]
    rows = [
        dataclasses.replace(r, output_text="", tool_calls=()) if i % 4 == 0 else r
        for i, r in enumerate(rows)
    ]
    verdict = run(workload, serve_model(rows), db, tmp_path)["verdict"]
    assert verdict["decision"] == Decision.ROLLBACK.value, verdict["reasons"]
    first = verdict["reasons"][0]
    assert first.startswith(
        "likely the token budget (max_tokens or the context length) (finish_reason length on "
    ), first


def test_a_deterministic_replica_is_named_so_never_a_recording(
    workload: Workload, serve_model: ServeModel, db: str, tmp_path: Path
) -> None:
    candidate = serve_model(workload.baseline_rows)
    replica = serve_model(workload.baseline_rows, name="demo-baseline-v1")
    verdict = run(
        workload, candidate, db, tmp_path,
        "--baseline-repeat-url", replica, "--baseline-repeat-share", "0.5",
    )["verdict"]  # fmt: skip
    degenerate = [r for r in verdict["reasons"] if r.startswith("degenerate noise floor")]
    assert degenerate, verdict["reasons"]
    assert "the baseline replica is deterministic" in degenerate[0]
    assert "fixed seed" in degenerate[0]
    assert not any("recording" in r for r in verdict["reasons"])
