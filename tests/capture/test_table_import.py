"""Import of recorded tables into capture logs, and the ``import`` command."""

from __future__ import annotations

import gzip
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest
import typer
from typer.testing import CliRunner

from shadoweval.capture.table_import import import_table, rejected_path_for, row_to_exchange
from shadoweval.capture_log import decode_exchange_line, read_capture_log
from shadoweval.cli import import_cmd
from shadoweval.errors import ConfigError, TableMappingError
from shadoweval.llm_protocol import ChatCompletionRequest
from shadoweval.records import (
    Exchange,
    FinishReason,
    ModelIdentity,
    TimingSource,
    UsageSource,
)
from shadoweval.tables import TableMapping, load_recorded_rows


def _exchanges(path: Path) -> list[Exchange]:
    if any(p.suffix == ".gz" for p in path.iterdir()):
        # read_capture_log leaves the raw file of a gzip segment unclosed (a
        # ResourceWarning, an error under -W error); read gzip segments directly.
        out: list[Exchange] = []
        for segment in sorted(path.glob("*.jsonl.gz")):
            with gzip.open(segment, "rt", encoding="utf-8") as fh:
                out.extend(decode_exchange_line(line, segment.name) for line in fh if line.strip())
        return out
    entries = list(read_capture_log(path))
    assert all(e.error is None for e in entries), [e.error for e in entries if e.error]
    return [e.exchange for e in entries if e.exchange is not None]


def test_bfcl_round_trip(shared_data: Path, tmp_path: Path) -> None:
    out = tmp_path / "capture"
    report = import_table(
        shared_data / "bfcl/result/gpt-4o-2024-08-06-FC",
        out=out,
        preset="bfcl",
        prompts=shared_data / "bfcl/data",
        sampling={"temperature": 0.7, "top_p": 1.0, "max_tokens": 1200},
    )
    assert (report.rows_read, report.written, report.rejected) == (1700, 1700, ())
    assert report.rejected_path is None
    exchanges = _exchanges(out)
    assert len(exchanges) == 1700
    assert Counter(e.task_type for e in exchanges)["relevance"] == 240
    stamps = [e.captured_at for e in exchanges]
    assert stamps == sorted(stamps)
    assert len(set(stamps)) == 1700
    ids = [e.exchange_id for e in exchanges]
    assert ids == sorted(ids)
    rows = load_recorded_rows(shared_data / "bfcl/result/gpt-4o-2024-08-06-FC", preset="bfcl").rows
    for row, exchange in zip(rows, exchanges, strict=True):
        body = exchange.request.json_body()
        assert body is not None
        request = ChatCompletionRequest.model_validate(body)
        assert request.model == "gpt-4o-2024-08-06-FC"
        assert request.stream is True
        assert request.stream_options is not None
        assert request.stream_options.include_usage
        assert request.tools is not None
        assert len(request.tools) == len(row.tools or [])
        assert body["tools"] == row.tools
        assert request.sampling_params()[0] == {
            "temperature": 0.7,
            "top_p": 1.0,
            "max_tokens": 1200,
        }
        assert exchange.source == f"import:{row.location}"
        assert exchange.baseline_model.name == "gpt-4o-2024-08-06-FC"
        response = exchange.response
        assert response is not None
        assert response.status_code == 200
        assert not response.streamed
        assert response.tool_calls == row.tool_calls
        assert response.text == (row.output_text if row.output_text is not None else "")
        assert response.finish_reason_raw is None
        assert response.finish_reason is FinishReason.UNKNOWN
        assert response.usage.usage_source is UsageSource.REPORTED
        assert response.usage.prompt_tokens == row.prompt_tokens
        assert response.usage.total_tokens == (row.prompt_tokens or 0) + (
            row.completion_tokens or 0
        )
        assert exchange.timings.source is TimingSource.RECORDED
        assert exchange.timings.e2e_ms == row.latency_ms
        assert exchange.timings.ttft_ms is None


def test_alpaca_import_without_stream_or_sampling(shared_data: Path, tmp_path: Path) -> None:
    out = tmp_path / "alpaca"
    report = import_table(
        shared_data / "alpaca_eval/Qwen1.5-72B-Chat/model_outputs.json",
        out=out,
        preset="alpaca_eval",
        stream=False,
        compress=True,
    )
    assert report.written == 805
    assert all(p.name.endswith(".jsonl.gz") for p in report.segments)
    exchanges = _exchanges(out)
    assert Counter(e.task_type for e in exchanges)["selfinstruct"] == 252
    body = exchanges[0].request.json_body()
    assert body is not None
    assert set(body) == {"model", "messages"}
    ChatCompletionRequest.model_validate(body)
    assert exchanges[0].response is not None
    assert exchanges[0].response.usage.usage_source is UsageSource.MISSING
    assert exchanges[0].response.usage.prompt_tokens is None
    assert exchanges[0].timings.source is TimingSource.MISSING


def test_mt_bench_import(shared_data: Path, tmp_path: Path) -> None:
    report = import_table(
        shared_data / "mt_bench/model_answer/vicuna-13b-v1.3.jsonl",
        out=tmp_path / "mt",
        preset="mt_bench",
        prompts=shared_data / "mt_bench/question.jsonl",
    )
    assert report.written == 80
    exchanges = _exchanges(tmp_path / "mt")
    assert Counter(e.task_type for e in exchanges) == Counter(
        {c: 10 for c in ("writing", "roleplay", "reasoning", "math")}
        | {c: 10 for c in ("coding", "extraction", "stem", "humanities")}
    )


def test_rejected_rows_are_reported_and_kept_beside_the_log(tmp_path: Path) -> None:
    table = tmp_path / "t.jsonl"
    rows = [
        {"q": "one", "a": "1", "lat": 120, "ttft": 20, "ct": 11},
        {"q": "two", "a": None, "lat": 50, "ttft": 10, "ct": 3},
        {"q": "three", "a": "3", "lat": "slow", "ttft": 10, "ct": 3},
    ]
    table.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    mapping = TableMapping(
        prompt_col="q",
        output_col="a",
        latency_col="lat",
        ttft_col="ttft",
        latency_unit="ms",
        completion_tokens_col="ct",
        model="m",
        finish_reason_col="a",
    )
    out = tmp_path / "log"
    report = import_table(table, out=out, mapping=mapping)
    assert (report.rows_read, report.written) == (3, 1)
    assert report.rejected_by_reason() == {"missing_output": 1, "bad_number": 1}
    assert report.rejected_path == rejected_path_for(out) == tmp_path / "log.rejected.jsonl"
    lines = [orjson.loads(x) for x in report.rejected_path.read_text().splitlines()]
    assert [(x["location"], x["reason"]) for x in lines] == [
        (f"{table}#1", "missing_output"),
        (f"{table}#2", "bad_number"),
    ]
    assert lines[0]["row"] == rows[1]
    [exchange] = _exchanges(out)  # the rejected file is not read as a segment
    assert exchange.timings.e2e_ms == 120
    assert exchange.timings.ttft_ms == 20
    assert exchange.timings.ttfc_ms == 20  # imported as streamed: the first token stands for it
    assert exchange.timings.tpot_ms == pytest.approx((120 - 20) / 10)
    flat = tmp_path / "flat"
    import_table(table, out=flat, mapping=mapping, stream=False)
    [not_streamed] = _exchanges(flat)
    assert not_streamed.timings.ttfc_ms == not_streamed.timings.e2e_ms == 120
    assert exchange.response is not None
    assert exchange.response.usage.completion_tokens == 11
    assert exchange.response.usage.prompt_tokens is None
    assert exchange.response.usage.total_tokens is None


def test_a_recorded_ttfc_column_is_the_imported_ttfc(tmp_path: Path) -> None:
    """A reasoning model's table: its first visible content came well after its first token."""
    table = tmp_path / "t.jsonl"
    rows = [{"q": "6x7?", "a": "42", "lat": 2.5, "ttft": 0.1, "ttfc": 1.9}]
    table.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    mapping = TableMapping(
        prompt_col="q",
        output_col="a",
        latency_col="lat",
        ttft_col="ttft",
        ttfc_col="ttfc",
        latency_unit="s",
        model="reasoner",
    )
    report = import_table(table, out=tmp_path / "log", mapping=mapping)
    assert report.written == 1, report
    [exchange] = _exchanges(tmp_path / "log")
    assert exchange.timings.ttft_ms == pytest.approx(100.0)
    assert exchange.timings.ttfc_ms == pytest.approx(1900.0)
    import_table(table, out=tmp_path / "flat", mapping=mapping, stream=False)
    [flat] = _exchanges(tmp_path / "flat")
    assert flat.timings.ttfc_ms == flat.timings.e2e_ms == pytest.approx(2500.0)
    with pytest.raises(ValueError, match="latency_unit"):
        TableMapping(prompt_col="q", output_col="a", ttfc_col="ttfc")


def test_row_to_exchange_model_identity_and_errors(tmp_path: Path) -> None:
    table = tmp_path / "t.csv"
    table.write_text("prompt,answer\nhello,world\n")
    [row] = load_recorded_rows(table, TableMapping(prompt_col="prompt", output_col="answer")).rows
    with pytest.raises(TableMappingError, match="no model name"):
        row_to_exchange(row, stream=True, sampling=None, baseline=None)
    identity = ModelIdentity(name="base", weights_hash="sha256:abc")
    at = datetime(2024, 5, 1, tzinfo=UTC)
    exchange = row_to_exchange(row, stream=False, sampling=None, baseline=identity, captured_at=at)
    assert exchange.baseline_model == identity
    assert exchange.captured_at == at
    assert exchange.request.json_body() == {
        "model": "base",
        "messages": [{"role": "user", "content": "hello"}],
    }
    with pytest.raises(ConfigError, match="unknown sampling"):
        row_to_exchange(row, stream=False, sampling={"temprature": 1}, baseline=identity)


def test_import_without_model_rejects_rows(tmp_path: Path) -> None:
    table = tmp_path / "t.csv"
    table.write_text("prompt,answer\nhello,world\n")
    report = import_table(
        table, out=tmp_path / "log", mapping=TableMapping(prompt_col="prompt", output_col="answer")
    )
    assert report.written == 0
    assert report.rejected_by_reason() == {"missing_model": 1}


# ------------------------------------------------------------------------------- CLI


def _app() -> typer.Typer:
    app = typer.Typer()
    import_cmd.register(app)

    @app.callback()
    def _root() -> None:
        """Test root."""

    return app


def test_cli_import_prints_summary_with_rejections(tmp_path: Path) -> None:
    table = tmp_path / "t.csv"
    table.write_text("id,prompt,answer,lat\n1,hi,hello,0.5\n2,bye,,0.2\n3,x,y,oops\n")
    out = tmp_path / "log"
    result = CliRunner().invoke(
        _app(),
        [
            "import",
            "--input",
            str(table),
            "--prompt-col",
            "prompt",
            "--output-col",
            "answer",
            "--id-col",
            "id",
            "--latency-col",
            "lat",
            "--latency-unit",
            "s",
            "--model",
            "m",
            "--task-type",
            "chat",
            "--no-stream",
            "--temperature",
            "0",
            "--out",
            str(out),
        ],
        terminal_width=120,
    )
    assert result.exit_code == 0, result.output
    assert "rows read" in result.output
    assert "written" in result.output
    assert "missing_output" in result.output
    assert "bad_number" in result.output
    [exchange] = _exchanges(out)
    assert exchange.request.json_body() == {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "temperature": 0.0,
    }
    assert exchange.task_type == "chat"
    assert exchange.timings.e2e_ms == 500.0


def test_cli_import_preset(shared_data: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(
        _app(),
        [
            "import",
            "--preset",
            "mt_bench",
            "--input",
            str(shared_data / "mt_bench/model_answer/gpt-3.5-turbo.jsonl"),
            "--prompts",
            str(shared_data / "mt_bench/question.jsonl"),
            "--out",
            str(tmp_path / "log"),
            "--gzip",
        ],
    )
    assert result.exit_code == 0, result.output
    assert len(_exchanges(tmp_path / "log")) == 80


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--preset", "alpaca_eval", "--prompt-col", "x"], "--preset cannot be combined"),
        (["--prompt-col", "prompt", "--output-col", "reply"], "'reply'"),
        (["--prompt-col", "prompt"], "give --preset"),
        (["--prompt-col", "prompt", "--output-col", "answer", "--latency-col", "x"], "latency"),
        (["--preset", "nope"], "unknown preset"),
    ],
)
def test_cli_import_user_errors_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    table = tmp_path / "t.csv"
    table.write_text("prompt,answer\nhi,hello\n")
    result = CliRunner().invoke(
        _app(),
        ["import", "--input", str(table), "--out", str(tmp_path / "log"), *args],
        terminal_width=200,
    )
    assert result.exit_code == 3, result.output
    assert message in result.output


def test_cli_import_nothing_written_exits_1(tmp_path: Path) -> None:
    table = tmp_path / "t.csv"
    table.write_text("prompt,answer\nhi,\n")
    result = CliRunner().invoke(
        _app(),
        [
            "import",
            "--input",
            str(table),
            "--prompt-col",
            "prompt",
            "--output-col",
            "answer",
            "--model",
            "m",
            "--out",
            str(tmp_path / "log"),
        ],
    )
    assert result.exit_code == 3


def test_cli_import_capture_time_column(tmp_path: Path) -> None:
    """``--captured-at-col``: each exchange keeps the row's capture time (UTC), and its
    ULID exchange id is built from it, so capture-time order survives the import."""
    table = tmp_path / "t.csv"
    table.write_text(
        "prompt,answer,at\nhi,hello,2026-11-29T23:00:00Z\nbye,ciao,2026-11-30T22:00:00-01:00\n"
    )
    out = tmp_path / "log"
    result = CliRunner().invoke(
        _app(),
        [
            "import",
            "--input",
            str(table),
            "--prompt-col",
            "prompt",
            "--output-col",
            "answer",
            "--captured-at-col",
            "at",
            "--model",
            "m",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    exchanges = _exchanges(out)
    assert [e.captured_at for e in exchanges] == [
        datetime(2026, 11, 29, 23, 0, tzinfo=UTC),
        datetime(2026, 11, 30, 23, 0, tzinfo=UTC),
    ]
    assert sorted(e.exchange_id for e in exchanges) == [e.exchange_id for e in exchanges]


def test_a_row_the_record_refuses_is_rejected_naming_the_field_and_the_import_goes_on(
    tmp_path: Path,
) -> None:
    """A row whose cells map but whose exchange the record refuses — a TTFT after the
    latency makes TPOT negative — is rejected with the field and the value (a negative
    TPOT used to be written to the capture log); the rows around it are written."""
    table = tmp_path / "t.jsonl"
    rows = [
        {"q": "one", "a": "1", "lat": 120, "ttft": 20, "ct": 11},
        {"q": "two", "a": "2", "lat": -5, "ttft": 1, "ct": 3},
        {"q": "three", "a": "3", "lat": 50, "ttft": 80, "ct": 3},
        {"q": "four", "a": "4", "lat": 90, "ttft": 10, "ct": 4},
    ]
    table.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    mapping = TableMapping(
        prompt_col="q", output_col="a", latency_col="lat", ttft_col="ttft",
        latency_unit="ms", completion_tokens_col="ct", model="m",
    )  # fmt: skip
    report = import_table(table, out=tmp_path / "log", mapping=mapping)
    assert (report.rows_read, report.written) == (4, 2)
    assert report.rejected_by_reason() == {"bad_number": 1, "invalid_record": 1}
    (refused,) = [r for r in report.rejected if r.reason == "invalid_record"]
    assert refused.detail.startswith(f"{table}#2: field 'tpot_ms'")  # (50 - 80) / 2 < 0
    assert "-15.0" in refused.detail
    kept = [orjson.loads(x) for x in rejected_path_for(tmp_path / "log").read_text().splitlines()]
    assert {x["reason"] for x in kept} == {"bad_number", "invalid_record"}
    assert [x["row"]["latency_ms"] for x in kept if x["reason"] == "invalid_record"] == [50]
    assert [e.source for e in _exchanges(tmp_path / "log")] == [
        f"import:{table}#0",
        f"import:{table}#3",
    ]


def test_cli_import_counts_and_reports_renamed_duplicate_keys(tmp_path: Path) -> None:
    """Issue 13: rows whose key repeated an earlier row's were renamed without a word."""
    table = tmp_path / "t.csv"
    table.write_text("id,prompt,answer\n1,hi,hello\n1,hi again,hello\n2,bye,ciao\n1,x,y\n")
    out = tmp_path / "log"
    result = CliRunner().invoke(
        _app(),
        ["import", "--input", str(table), "--prompt-col", "prompt", "--output-col", "answer",
         "--id-col", "id", "--model", "m", "--out", str(out)],
        terminal_width=160,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "duplicate keys renamed" in result.output
    assert "2 rows repeated an earlier row's key" in " ".join(result.output.split())
    assert len(_exchanges(out)) == 4  # kept, all of them


def test_importing_a_trace_log_twice_gives_the_same_exchange_ids(tmp_path: Path) -> None:
    """Overlapping daily exports must not count a span twice: the id is a function of the
    record's key and capture time (imported_exchange_id), so replay drops the repeat."""
    log = Path(__file__).parents[1] / "tables" / "fixtures" / "traces" / "litellm.jsonl"
    first = import_table(log, out=tmp_path / "a", mapping=None, preset="litellm")
    second = import_table(log, out=tmp_path / "b", mapping=None, preset="litellm")
    assert first.written == second.written > 0
    ids = [[e.exchange_id for e in _exchanges(tmp_path / d)] for d in ("a", "b")]
    assert ids[0] == ids[1]
    assert len(set(ids[0])) == len(ids[0])


def test_the_rejected_file_of_an_import_into_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    assert rejected_path_for(".") == tmp_path / "here.rejected.jsonl"
    assert rejected_path_for("/") == Path("/import.rejected.jsonl")
