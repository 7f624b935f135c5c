"""Export → read back with pandas / pyarrow / json → the repository's samples, in every format
(SQLite and PostgreSQL)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shadoweval.application.redaction import body_redaction
from shadoweval.errors import ConfigError
from shadoweval.export import (
    EXPORT_COLUMNS,
    MANIFEST_SCHEMA_VERSION,
    ExportRedaction,
    build_export,
    export_archive,
    make_request,
    stale_samples,
    write_export,
)
from shadoweval.pair_flags import PairFlag
from shadoweval.storage import Repository
from shadoweval.storage.samples import SampleFilter
from tests.export.readback import (
    decoded,
    expected_rows,
    files,
    read_csv,
    records,
    unzip,
)
from tests.export.seed import POLICY_HASH, TASK_TYPES, TRICKY, Seeded

FORMATS = ("csv", "jsonl", "parquet")


def lowest_ids(repo: Repository, run_id: str, flt: SampleFilter, n: int) -> list[str]:
    """The ids an export of the n lowest must hold: per task type (sorted), page order."""
    out: list[str] = []
    for task_type in repo.task_types(run_id):
        out += [i for i, _ in repo.sample_ids(run_id, flt, task_type)[:n]]
    return out


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_reads_back_to_the_repository_samples(
    repo: Repository, seeded: Seeded, tmp_path: Path, fmt: str
) -> None:
    run_id = seeded.run.run_id
    request = make_request(run_id, per_task_type=5, fmt=fmt)
    result = build_export(repo, request, redact=body_redaction())
    paths = write_export(result, tmp_path / "out")
    assert [p.name for p in paths] == [f"samples.{fmt}", "manifest.json"]

    rows = records(paths[0].name, paths[0].read_bytes())
    ids = lowest_ids(repo, run_id, SampleFilter(), 5)
    assert [r["exchange_id"] for r in rows] == ids
    samples = repo.samples_by_ids(run_id, ids)
    assert [decoded(r) for r in rows] == expected_rows(paths[0].name, samples)
    assert list(rows[0]) == list(EXPORT_COLUMNS)
    # the hard texts all made it, byte for byte
    texts = {r["baseline_text"] for r in rows} | {r["candidate_text"] for r in rows}
    for tricky in TRICKY:
        if tricky:
            assert any(tricky in t for t in texts), tricky
    assert "" in {r["candidate_text"] for r in rows}  # an errored candidate: empty text
    # an errored candidate says so, so it is not labelled "worse" by mistake
    errored = {r["exchange_id"]: r["candidate_error_kind"] for r in rows}
    assert {s.exchange_id: s.candidate_error_kind or "" for s in samples} == errored
    assert set(errored.values()) == {"", "timeout"}
    assert list(EXPORT_COLUMNS[-3:]) == ["candidate_error_kind", "label", "label_note"]

    manifest = json.loads(paths[1].read_text(encoding="utf-8"))
    assert manifest["schema_version"] == MANIFEST_SCHEMA_VERSION
    assert manifest["run_id"] == run_id
    assert manifest["policy_hash"] == POLICY_HASH
    assert manifest["format"] == fmt
    assert manifest["file"] == f"samples.{fmt}"
    assert manifest["columns"] == list(EXPORT_COLUMNS)
    assert manifest["order"] == "lowest"
    assert manifest["per_task_type"] == 5
    assert manifest["seed"] is None
    assert manifest["filters"] == {
        "task_types": [],
        "flags": [],
        "min_similarity": None,
        "max_similarity": None,
        "changed_unjudged": False,
        "exchange_ids": None,
    }
    assert manifest["counts"] == {
        t: {"matching": n, "exported": min(n, 5)} for t, n in sorted(TASK_TYPES.items())
    }
    assert manifest["total"] == {"matching": 22, "exported": 13}
    assert manifest["redaction"]["rules"] == [
        "secret_field",
        "secret_key",
        "email",
        "card_number",
        "phone",
    ]
    # no false positive on the tricky texts (no e-mail, phone, card or key in them)
    assert manifest["redaction"]["counts"] == {
        "secret_field": 0,
        "secret_key": 0,
        "email": 0,
        "card_number": 0,
        "phone": 0,
    }


def test_parquet_has_sensible_types(repo: Repository, seeded: Seeded) -> None:
    result = build_export(
        repo, make_request(seeded.run.run_id, fmt="parquet"), redact=body_redaction()
    )
    data = unzip(export_archive(result))["samples.parquet"]
    table = pq.read_table(io.BytesIO(data))
    schema = table.schema
    assert schema.field("similarity").type == pa.float64()
    assert schema.field("similarity").nullable
    assert schema.field("noise_similarity").type == pa.float64()
    assert schema.field("captured_at").type == pa.timestamp("us", tz="UTC")
    for name in (
        "exchange_id",
        "flags",
        "request",
        "baseline_text",
        "candidate_error_kind",
        "label",
        "label_note",
    ):
        assert schema.field(name).type == pa.string()
    assert table.column("similarity").null_count == 3  # the errored pairs
    frame = table.to_pandas()
    assert str(frame["similarity"].dtype) == "float64"
    assert str(frame["captured_at"].dtype) == "datetime64[us, UTC]"


def test_jsonl_is_one_object_per_line_and_csv_quotes_line_breaks(
    repo: Repository, seeded: Seeded
) -> None:
    run_id = seeded.run.run_id
    jsonl = build_export(repo, make_request(run_id, fmt="jsonl"), redact=body_redaction())
    data = unzip(export_archive(jsonl))["samples.jsonl"]
    lines = data.split(b"\n")
    assert lines[-1] == b""  # a final newline
    assert len(lines[:-1]) == 22
    for line in lines[:-1]:
        assert isinstance(json.loads(line), dict)
    csv = build_export(repo, make_request(run_id, fmt="csv"), redact=body_redaction())
    frame = read_csv(unzip(export_archive(csv))["samples.csv"])
    assert len(frame) == 22
    assert str(frame["similarity"].dtype) == "float64"
    assert frame["similarity"].isna().sum() == 3
    assert "NA" in set(frame["candidate_text"])  # text "NA" stays text
    assert any("\r\n" in t for t in frame["baseline_text"])


def test_zip_holds_exactly_the_files_written(
    repo: Repository, seeded: Seeded, tmp_path: Path
) -> None:
    for fmt in FORMATS:
        result = build_export(
            repo, make_request(seeded.run.run_id, fmt=fmt), redact=body_redaction()
        )
        write_export(result, tmp_path / fmt)
        assert unzip(export_archive(result)) == files(tmp_path / fmt)


def test_random_order_is_seeded_numpy_choice_per_task_type(
    repo: Repository, seeded: Seeded
) -> None:
    run_id = seeded.run.run_id
    flt = SampleFilter(max_similarity=0.9)
    request = make_request(run_id, per_task_type=4, order="random", seed=11, max_similarity=0.9)
    first = build_export(repo, request, redact=body_redaction())
    again = build_export(repo, request, redact=body_redaction())
    assert list(first.rows["exchange_id"]) == list(again.rows["exchange_id"])
    assert first.manifest["seed"] == 11
    for task_type in sorted(TASK_TYPES):
        band = repo.sample_ids(run_id, flt, task_type)
        population = sorted(i for i, _ in band)
        size = min(4, len(population))
        expected = set(np.random.default_rng(11).choice(population, size=size, replace=False))
        got = first.rows.loc[first.rows["task_type"] == task_type]
        assert set(got["exchange_id"]) == expected
        assert (got["similarity"] <= 0.9).all()
        assert first.manifest["counts"][task_type] == {"matching": len(band), "exported": size}
    other = build_export(
        repo,
        make_request(run_id, per_task_type=4, order="random", seed=12, max_similarity=0.9),
        redact=body_redaction(),
    )
    assert list(other.rows["exchange_id"]) != list(first.rows["exchange_id"])


def test_lowest_with_a_band_leaves_out_pairs_without_similarity(
    repo: Repository, seeded: Seeded
) -> None:
    run_id = seeded.run.run_id
    result = build_export(
        repo,
        make_request(run_id, per_task_type=3, min_similarity=0.0, max_similarity=0.5),
        redact=body_redaction(),
    )
    rows = result.rows
    assert rows["similarity"].notna().all()
    assert rows["similarity"].between(0.0, 0.5).all()
    assert list(rows["exchange_id"]) == lowest_ids(
        repo, run_id, SampleFilter(min_similarity=0.0, max_similarity=0.5), 3
    )
    # without a bound the errored pairs come first
    unbounded = build_export(repo, make_request(run_id, per_task_type=2), redact=body_redaction())
    chat = unbounded.rows.loc[unbounded.rows["task_type"] == "chat"]
    assert chat["similarity"].isna().all()


def test_flag_and_task_type_filters(repo: Repository, seeded: Seeded) -> None:
    run_id = seeded.run.run_id
    result = build_export(
        repo,
        make_request(
            run_id, task_types=["extract", "chat"], flags=["template_leak", "below_noise_floor"]
        ),
        redact=body_redaction(),
    )
    assert set(result.rows["task_type"]) <= {"chat", "extract"}
    assert len(result.rows) > 0
    for flags in result.rows["flags"]:
        assert {"template_leak", "below_noise_floor"} <= set(flags.split(";"))
    by_id = {s.exchange_id: s for s in seeded.scores}
    expected = {
        i
        for i, s in by_id.items()
        if s.task_type in ("chat", "extract")
        and s.template_leaks
        and s.similarity is not None
        and s.similarity < 0.91
    }
    assert set(result.rows["exchange_id"]) == expected
    assert result.manifest["filters"]["task_types"] == ["extract", "chat"]
    assert result.manifest["filters"]["flags"] == [
        PairFlag.TEMPLATE_LEAK.value,
        PairFlag.BELOW_NOISE_FLOOR.value,
    ]
    assert set(result.manifest["counts"]) == {"chat", "extract"}


def test_an_export_that_matches_nothing_is_valid_and_empty(
    repo: Repository, seeded: Seeded, tmp_path: Path
) -> None:
    request = make_request(seeded.run.run_id, min_similarity=1.0, max_similarity=1.0,
                           task_types=["summarize"])  # fmt: skip
    for fmt in FORMATS:
        result = build_export(
            repo,
            make_request(
                seeded.run.run_id,
                fmt=fmt,
                task_types=request.flt.task_types,
                min_similarity=1.0,
                max_similarity=1.0,
            ),
            redact=body_redaction(),
        )
        assert result.manifest["total"] == {"matching": 0, "exported": 0}
        path = write_export(result, tmp_path / fmt)[0]
        assert records(path.name, path.read_bytes()) == []
    header = (tmp_path / "csv" / "samples.csv").read_text(encoding="utf-8")
    assert header == ",".join(EXPORT_COLUMNS) + "\n"
    table = pq.read_table(tmp_path / "parquet" / "samples.parquet")
    assert table.num_rows == 0
    assert table.schema.field("similarity").type == pa.float64()


def test_writing_another_format_removes_only_the_stale_samples_files(
    repo: Repository, seeded: Seeded, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    for fmt in FORMATS:
        (out / f"samples.{fmt}").write_bytes(b"old")  # as if left by earlier exports
    (out / "samples.xlsx").write_bytes(b"keep")
    (out / "readme.txt").write_bytes(b"keep")
    result = build_export(
        repo, make_request(seeded.run.run_id, fmt="jsonl"), redact=body_redaction()
    )
    assert stale_samples(out, "jsonl") == [out / "samples.csv", out / "samples.parquet"]
    paths = write_export(result, out)
    assert [p.name for p in paths] == ["samples.jsonl", "manifest.json"]
    assert sorted(p.name for p in out.iterdir()) == [
        "manifest.json",
        "readme.txt",
        "samples.jsonl",
        "samples.xlsx",
    ]
    assert stale_samples(out, "jsonl") == []


def test_unknown_run_or_task_type_is_refused(repo: Repository, seeded: Seeded) -> None:
    with pytest.raises(ConfigError, match="run 'ghost' not found"):
        build_export(repo, make_request("ghost"), redact=body_redaction())
    with pytest.raises(ConfigError, match="task_type 'poetry' has no pairs") as caught:
        build_export(
            repo, make_request(seeded.run.run_id, task_types=["poetry"]), redact=body_redaction()
        )
    assert "chat, extract, summarize" in str(caught.value)


def test_every_text_column_goes_through_the_redactor(repo: Repository, seeded: Seeded) -> None:
    """A redactor that rewrites every letter shows which columns it reached."""

    def shout(text: str) -> str:
        return text.upper()

    result = build_export(
        repo,
        make_request(seeded.run.run_id, per_task_type=2),
        redact=ExportRedaction(redact=shout, rules=("shout",)),
    )
    row = result.rows.iloc[0]
    for column in ("baseline_text", "candidate_text"):
        assert row[column] == row[column].upper()
    request = json.loads(row["request"])
    assert request[0]["role"] == "SYSTEM"  # values redacted, keys kept
    assert "content" in request[0]
    calls = json.loads(row["baseline_tool_calls"])
    assert calls[0]["name"] == "LOOKUP"
    assert row["exchange_id"].startswith("ex-")  # ids are not texts
    assert result.manifest["redaction"] == {"rules": ["shout"], "counts": {"shout": 0}}
