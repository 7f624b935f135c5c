"""Importing trace logs (``otel_genai``, ``langfuse``, ``litellm``) into capture logs.

Trace imports go through the application layer as ``shadow-eval import`` does, so the
configured capture rules apply: body redaction (a planted API key never reaches the
capture log or the rejected file), task-type tagging and salted session hashes. The end
to end test imports with the CLI and replays the capture log with ``replay run`` against
mock-llm (a test double serving the same rows).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner, Result

from shadoweval.application.importing import ImportReport, ImportRequest, TableSource, import_table
from shadoweval.capture.sampling import hash_session_key
from shadoweval.capture.table_import import CaptureRules, import_rows
from shadoweval.capture.tagging import TaskTagger
from shadoweval.capture_log import read_capture_log
from shadoweval.cli import app
from shadoweval.config import TaskTypeRule
from shadoweval.records import Exchange
from shadoweval.serving import BackgroundServer
from shadoweval.simulation.mock_llm import FaultConfig, TableLatency, create_app
from shadoweval.tables import load_recorded_rows

FIXTURES = Path(__file__).resolve().parents[1] / "tables" / "fixtures" / "traces"

PLANTED = (
    "sk-proj-Zx81Qw7Lm2Np4Rt6Vy9Bc3Df5Gh8Jk1",  # OTel user message event
    "sk-proj-Ab12Cd34Ef56Gh78Ij90Kl12Mn34",  # LiteLLM message
    "sk-live-9f8e7d6c5b4a39281706f5e4d3c2b1a0",  # LiteLLM metadata and error_str
    "lf-internal-2f9c8e7d6b5a",  # Langfuse metadata.api_key
    "dana.lee@example.org",  # Langfuse prompt
    "ops@example.com",  # OTel gen_ai.input.messages
)


def exchanges(out: Path) -> list[Exchange]:
    entries = list(read_capture_log(out))
    assert all(e.error is None for e in entries), [e.error for e in entries if e.error]
    return [e.exchange for e in entries if e.exchange is not None]


def trace_import(
    preset: str,
    name: str,
    out: Path,
    *,
    stream: bool = True,
    redact: bool | None = None,
    limit: int | None = None,
) -> ImportReport:
    source = TableSource(FIXTURES / name, preset=preset)
    request = ImportRequest(table=source, out=out, stream=stream, redact=redact, limit=limit)
    return import_table(request)


def written_text(out: Path) -> str:
    """Everything the import wrote: the segments and the rejected file beside them."""
    parts = [p.read_text(encoding="utf-8") for p in sorted(out.glob("*.jsonl"))]
    rejected = out.with_name(out.name + ".rejected.jsonl")
    if rejected.exists():
        parts.append(rejected.read_text(encoding="utf-8"))
    return "\n".join(parts)


CASES = [
    ("otel_genai", "otel_events.json"),
    ("otel_genai", "otel_messages.jsonl"),
    ("langfuse", "langfuse_observations.json"),
    ("langfuse", "langfuse_trace.json"),
    ("litellm", "litellm.jsonl"),
]


@pytest.mark.parametrize(("preset", "name"), CASES)
def test_planted_secrets_never_reach_the_capture_log_or_the_rejected_file(
    preset: str, name: str, tmp_path: Path
) -> None:
    source = (FIXTURES / name).read_text(encoding="utf-8")
    planted = [p for p in PLANTED if p in source]
    out = tmp_path / "capture"
    trace_import(preset, name, out)
    text = written_text(out)
    for secret in planted:
        assert secret not in text, f"{secret} leaked into what {preset} import wrote"
    # the API key hash LiteLLM logs, the requester's IP: metadata is never stored
    assert "88dc28d0f030c55ed4ab77ed8faf098196cb1c05df778539800c9f1243fe6b4b" not in "".join(
        p.read_text(encoding="utf-8") for p in out.glob("*.jsonl")
    )
    assert "10.4.2.17" not in "".join(p.read_text(encoding="utf-8") for p in out.glob("*.jsonl"))


def test_redaction_is_reported_where_it_fired(tmp_path: Path) -> None:
    out = tmp_path / "capture"
    report = trace_import("litellm", "litellm.jsonl", out)
    assert report.redacted == 1
    first = next(e for e in exchanges(out) if e.source and e.source.endswith("litellm.jsonl:1"))
    body = first.request.json_body()
    assert body is not None
    assert body["messages"][0]["content"] == "My API key [REDACTED:secret_key] leaked, what now?"
    assert [(h.rule, h.location) for h in first.redaction.hits] == [
        ("secret_key", "request.messages[0].content")
    ]
    rejected = out.with_name("capture.rejected.jsonl").read_text(encoding="utf-8")
    failed = next(json.loads(line) for line in rejected.splitlines() if "failed_call" in line)
    assert "[REDACTED:secret_key]" in failed["detail"]  # error_str quoted the key
    assert failed["row"]["metadata"]["spend_logs_metadata"]["openai_api_key"] == (
        "[REDACTED:secret_field]"
    )


def test_no_redact_keeps_the_recorded_text(tmp_path: Path) -> None:
    out = tmp_path / "capture"
    trace_import("litellm", "litellm.jsonl", out, redact=False)
    assert "sk-proj-Ab12Cd34Ef56Gh78Ij90Kl12Mn34" in written_text(out)


def test_otel_exchanges_hold_route_models_usage_timings_and_session_hash(tmp_path: Path) -> None:
    out = tmp_path / "capture"
    report = trace_import("otel_genai", "otel_messages.jsonl", out, stream=False)
    assert report.written == 3
    # source = import:<file>:<line>/span<n>
    rows = {e.source.rsplit(":", 1)[-1]: e for e in exchanges(out) if e.source}
    chat = rows["1/span0"]
    assert chat.route == "/v1/chat/completions"
    assert chat.baseline_model.name == "gpt-4.1"
    assert chat.response is not None
    assert chat.response.model == "gpt-4.1-2025-04-14"
    assert chat.response.usage.prompt_tokens == 97
    assert chat.timings.e2e_ms == 1250.0
    assert chat.captured_at.timestamp() == 1733223600.0
    assert chat.session_key_hash == hash_session_key(b"shadow-eval", b"sess-42")
    assert rows["1/span1"].session_key_hash == chat.session_key_hash  # the same conversation
    body = chat.request.json_body()
    assert body is not None
    assert body["temperature"] == 0.0
    assert body["seed"] == 7
    assert body["tools"][0]["function"]["name"] == "get_weather"
    assert "[REDACTED:email]" in body["messages"][1]["content"]
    legacy = rows["5/span0"]
    assert legacy.request.path == "/v1/completions"
    assert legacy.request.json_body() == {
        "model": "gpt-3.5-turbo-instruct",
        "prompt": "Say hello in French:",
        "max_tokens": 32,
    }
    assert legacy.response is not None
    assert legacy.response.text == " Bonjour !"
    assert "sess-42" not in written_text(out)


def test_session_salt_comes_from_the_capture_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SHADOWEVAL_CAPTURE__SESSION_SALT", "pepper")
    out = tmp_path / "capture"
    trace_import("langfuse", "langfuse_trace.json", out)
    (exchange,) = exchanges(out)
    assert exchange.session_key_hash == hash_session_key(b"pepper", b"chat-session-1207")


def test_task_types_from_recorded_metadata_else_the_capture_rules(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "lf"
    trace_import("langfuse", "langfuse_observations.json", out)
    assert [e.task_type for e in exchanges(out)] == ["summarization"]  # metadata.task_type
    out = tmp_path / "litellm"
    trace_import("litellm", "litellm.jsonl", out)
    assert {e.task_type for e in exchanges(out)} == {"support_chat"}  # requester_metadata
    monkeypatch.setenv(
        "SHADOWEVAL_CAPTURE__TASK_TYPE_RULES", '[{"task_type": "tool_use", "has_tools": true}]'
    )
    out = tmp_path / "otel"
    trace_import("otel_genai", "otel_messages.jsonl", out)
    by_tools = {
        bool((e.request.json_body() or {}).get("tools")): e.task_type for e in exchanges(out)
    }
    assert by_tools == {True: "tool_use", False: "default"}


def test_capture_rules_tag_from_the_original_request_before_redaction(tmp_path: Path) -> None:
    loaded = load_recorded_rows(FIXTURES / "otel_events.json", preset="otel_genai")
    rules = CaptureRules(
        tagger=TaskTagger(rules=(TaskTypeRule(task_type="chat_mini", model="gpt-4o-mini"),)),
    )
    import_rows(loaded, out=tmp_path / "capture", rules=rules)
    assert {e.task_type for e in exchanges(tmp_path / "capture")} == {"chat_mini"}


def test_cache_hits_are_marked_and_left_as_recorded(tmp_path: Path) -> None:
    out = tmp_path / "capture"
    trace_import("litellm", "litellm.jsonl", out)
    hits = [e for e in exchanges(out) if e.response is not None and e.response.cache_hit]
    assert len(hits) == 1
    assert hits[0].response is not None
    assert [h.name for h in hits[0].response.cache_hit_headers] == [
        "x-shadow-eval-imported-cache-hit"
    ]


def test_limit_writes_the_first_n_and_counts_the_rest(tmp_path: Path) -> None:
    out = tmp_path / "capture"
    report = trace_import("litellm", "litellm.jsonl", out, limit=2)
    assert report.written == 2
    assert report.over_limit == 2
    assert len(report.rejected) == 3


# ---------------------------------------------------------------------------- CLI


def cli(*args: object) -> Result:
    return CliRunner().invoke(app, [str(a) for a in args])


def test_cli_import_reports_counts_by_reason(tmp_path: Path) -> None:
    out = tmp_path / "capture"
    result = cli(
        "import", "--preset", "otel_genai", "--input", FIXTURES / "otel_events.json",
        "--out", out,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())
    assert "rows read │ 5" in text
    assert "written │ 2" in text
    for reason in ("not_chat_span", "no_content", "failed_call"):
        assert f"{reason} │ 1" in text
    rejected = [
        orjson.loads(line)
        for line in out.with_name("capture.rejected.jsonl").read_bytes().splitlines()
    ]
    assert sorted(r["reason"] for r in rejected) == ["failed_call", "no_content", "not_chat_span"]


def test_cli_import_of_only_unmappable_records_exits_3(tmp_path: Path) -> None:
    spans = tmp_path / "no_content.jsonl"
    spans.write_text(
        (FIXTURES / "otel_events.json").read_text(encoding="utf-8").replace("\n", " ")
        .replace("gen_ai.user.message", "x").replace("gen_ai.system.message", "x")
        .replace("gen_ai.choice", "x"),
        encoding="utf-8",
    )  # fmt: skip
    result = cli("import", "--preset", "otel_genai", "--input", spans, "--out", tmp_path / "c")
    assert result.exit_code == 3
    assert "written │ 0" in " ".join(result.stdout.split())
    assert "no_content │ 3" in " ".join(result.stdout.split())


def test_cli_limit_must_be_positive(tmp_path: Path) -> None:
    result = cli(
        "import", "--preset", "litellm", "--input", FIXTURES / "litellm.jsonl",
        "--out", tmp_path / "c", "--limit", 0,
    )  # fmt: skip
    assert result.exit_code == 3  # every shadow-eval usage error
    assert "--limit" in result.output


# --------------------------------------------------------------------- end to end


@pytest.fixture
def mock_candidate() -> Iterator[str]:
    rows = load_recorded_rows(FIXTURES / "litellm.jsonl", preset="litellm").rows
    mock = create_app(
        rows,
        latency=TableLatency(),
        faults=FaultConfig(),
        seed=1,
        model_name="candidate-v2",
        time_scale=0.0,
    )
    with BackgroundServer(mock) as server:
        yield server.url


def test_cli_import_then_replay_run_reads_the_capture_log(
    tmp_path: Path, mock_candidate: str
) -> None:
    out = tmp_path / "capture"
    imported = cli(
        "import", "--preset", "litellm", "--input", FIXTURES / "litellm.jsonl", "--out", out,
    )  # fmt: skip
    assert imported.exit_code == 0, imported.output
    assert len(exchanges(out)) == 4
    db = f"sqlite:///{tmp_path / 'results.db'}"
    replayed = cli(
        "replay", "run", "--source", out, "--candidate-url", mock_candidate,
        "--database-url", db, "--run-id", "traces", "--no-progress",
    )  # fmt: skip
    assert replayed.exit_code == 0, replayed.stderr
    counts = json.loads(replayed.stdout)
    assert counts["run_id"] == "traces"
    assert counts["lines_read"] == 4
    assert sum(counts["sent"].values()) == 4


def test_redact_applies_the_capture_rules_to_a_table_import_too(tmp_path: Path) -> None:
    table = tmp_path / "table.jsonl"
    table.write_text(
        '{"prompt": "mail me at kim@example.com", "answer": "ok", "model": "m"}\n',
        encoding="utf-8",
    )
    common = ("--input", table, "--prompt-col", "prompt", "--output-col", "answer",
              "--model-col", "model")  # fmt: skip
    plain = cli("import", *common, "--out", tmp_path / "plain")
    redacted = cli("import", *common, "--out", tmp_path / "redacted", "--redact")
    assert plain.exit_code == redacted.exit_code == 0
    assert "kim@example.com" in written_text(tmp_path / "plain")  # a table: as published
    assert "kim@example.com" not in written_text(tmp_path / "redacted")
    assert "[REDACTED:email]" in written_text(tmp_path / "redacted")
