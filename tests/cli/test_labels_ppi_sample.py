"""The random label sample end to end: ``export --ppi-sample``, an analyst labels it (and
adds rows of their own), ``labels import`` marks exactly the sampled pairs' labels with the
sample's id and counts the rest as chosen by hand. Through CliRunner, SQLite and
PostgreSQL.
"""

from __future__ import annotations

import io
import json
import shutil
import zipfile
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner, Result

from shadoweval.application.exporting import export_zip, make_request
from shadoweval.application.labels import make_label
from shadoweval.application.redaction import body_redaction
from shadoweval.cli import app
from shadoweval.storage import Database, Repository
from tests.export.labelled import read_rows, write_rows
from tests.export.seed import RUN_ID, TASK_TYPES, seed_database


def cli(*args: object) -> Result:
    return CliRunner().invoke(app, [str(a) for a in args])


def flat(text: str) -> str:
    return " ".join(text.replace("│", " ").replace("┃", " ").split())


@pytest.fixture
def seeded_url(empty_url: str) -> str:
    seed_database(empty_url)
    return empty_url


def _export_sample(url: str, out: Path, *extra: object, fmt: str = "csv") -> dict[str, object]:
    result = cli(
        "export", "--run", RUN_ID, "--out", out, "--format", fmt, "--ppi-sample",
        "--database-url", url, *extra,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    manifest: dict[str, object] = json.loads((out / "manifest.json").read_text("utf-8"))
    sample = manifest["ppi_sample"]
    assert isinstance(sample, dict)
    assert f"random label sample {sample['id']} (PPI)" in flat(result.stdout)
    return manifest


def _label_all(path: Path, added: list[str]) -> set[str]:
    """Label every row of the export ``candidate_worse`` and add rows for ``added`` (pairs
    the analyst picked by hand); returns the exchange ids labelled."""
    rows = read_rows(path)
    schema = pq.read_schema(path) if path.suffix == ".parquet" else None
    for row in rows:
        row["label"] = "candidate_worse"
    template = dict(rows[0])
    for exchange_id in added:
        rows.append({**template, "exchange_id": exchange_id, "label": "same"})
    write_rows(path, rows, schema)
    return {str(r["exchange_id"]) for r in rows}


def _stored(url: str) -> dict[str, str | None]:
    with Database(url) as db:
        return {label.exchange_id: label.sample for label in Repository(db).load_labels(RUN_ID)}


def _import(url: str, path: Path, *extra: object) -> Result:
    return cli(
        "labels", "import", path, "--run", RUN_ID, "--labeller", "ana", "--database-url", url,
        *extra,
    )  # fmt: skip


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_sampled_labels_are_marked_and_added_rows_are_chosen_by_hand(
    seeded_url: str, tmp_path: Path, fmt: str
) -> None:
    out = tmp_path / "sample"
    manifest = _export_sample(seeded_url, out, "--fraction", "0.3", "--seed", 11, fmt=fmt)
    sample = manifest["ppi_sample"]
    assert isinstance(sample, dict)
    assert sample["id"] == "ppi-seed-11-fraction-0.3"
    drawn = set(sample["exchange_ids"])
    # every seeded pair is changed: ceil(0.3 × n) of each task type, at least 2 of one with 2+
    want = sum(max(-(-3 * n // 10), min(2, n)) for n in TASK_TYPES.values())
    assert len(drawn) == 4 + 3 + 2 == want
    with Database(seeded_url) as db:
        every = {s.exchange_id for s in Repository(db).load_pair_scores(RUN_ID)}
    added = sorted(every - drawn)[:2]
    labelled = _label_all(out / f"samples.{fmt}", added)
    assert labelled == drawn | set(added)

    result = _import(seeded_url, out / f"samples.{fmt}")
    assert result.exit_code == 0, result.output
    assert (
        f"{len(labelled)} labels imported: {len(drawn)} in random sample "
        f"ppi-seed-11-fraction-0.3 (PPI), 2 chosen by hand"
    ) in flat(result.stdout)
    stored = _stored(seeded_url)
    assert stored == {
        **{i: "ppi-seed-11-fraction-0.3" for i in drawn},
        **{i: None for i in added},
    }


def test_without_a_manifest_every_label_is_chosen_by_hand_and_said_so(
    seeded_url: str, tmp_path: Path
) -> None:
    out = tmp_path / "sample"
    _export_sample(seeded_url, out, "--per-task-type", 2, "--seed", 5)
    labelled = _label_all(out / "samples.csv", [])
    alone = tmp_path / "elsewhere" / "labelled.csv"
    alone.parent.mkdir()
    shutil.copy(out / "samples.csv", alone)
    result = _import(seeded_url, alone)
    assert result.exit_code == 0, result.output
    assert (
        f"{len(labelled)} labels imported: all chosen by hand (no manifest.json beside "
        "labelled.csv and no --manifest: not a random label sample)"
    ) in flat(result.stdout)
    assert set(_stored(seeded_url).values()) == {None}
    # the manifest named explicitly marks them (and a re-import relabels the same pairs)
    result = _import(seeded_url, alone, "--manifest", out / "manifest.json")
    assert result.exit_code == 0, result.output
    assert (
        f"{len(labelled)} labels imported: {len(labelled)} in random sample "
        "ppi-seed-5-n-2 (PPI), 0 chosen by hand"
    ) in flat(result.stdout)
    assert set(_stored(seeded_url).values()) == {"ppi-seed-5-n-2"}


def test_a_lowest_similarity_export_beside_its_manifest_is_chosen_by_hand(
    seeded_url: str, tmp_path: Path
) -> None:
    out = tmp_path / "lowest"
    result = cli(
        "export", "--run", RUN_ID, "--out", out, "--per-task-type", 2, "--database-url",
        seeded_url,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert json.loads((out / "manifest.json").read_text("utf-8"))["ppi_sample"] is None
    labelled = _label_all(out / "samples.csv", [])
    result = _import(seeded_url, out / "samples.csv")
    assert result.exit_code == 0, result.output
    assert (
        f"{len(labelled)} labels imported: all chosen by hand (manifest "
        f"{out / 'manifest.json'} records no random label sample)"
    ) in flat(result.stdout)
    assert set(_stored(seeded_url).values()) == {None}


def test_the_export_zip_imports_with_its_manifest(seeded_url: str, tmp_path: Path) -> None:
    with Database(seeded_url) as db:
        request = make_request(RUN_ID, ppi_sample=True, per_task_type=3, seed=8)
        archive = export_zip(Repository(db), request, redact=body_redaction())
    unpacked = tmp_path / "unpacked"
    with zipfile.ZipFile(io.BytesIO(archive.data)) as zipped:
        zipped.extractall(unpacked)
    _label_all(unpacked / "samples.csv", [])
    labelled_zip = tmp_path / "labelled.zip"
    with zipfile.ZipFile(labelled_zip, "w") as zipped:
        for name in ("samples.csv", "manifest.json"):
            zipped.write(unpacked / name, name)
    result = _import(seeded_url, labelled_zip)
    assert result.exit_code == 0, result.output
    assert "9 labels imported: 9 in random sample ppi-seed-8-n-3 (PPI), 0 chosen by hand" in flat(
        result.stdout
    )
    assert set(_stored(seeded_url).values()) == {"ppi-seed-8-n-3"}


def test_a_manifest_of_another_runs_sample_is_refused(seeded_url: str, tmp_path: Path) -> None:
    out = tmp_path / "sample"
    _export_sample(seeded_url, out, "--per-task-type", 2, "--seed", 5)
    _label_all(out / "samples.csv", [])
    path = out / "manifest.json"
    manifest = json.loads(path.read_text("utf-8"))
    path.write_text(json.dumps({**manifest, "run_id": "other-run"}), "utf-8")
    result = _import(seeded_url, out / "samples.csv")
    assert result.exit_code == 3
    assert "random label sample of run 'other-run', not of run 'run-export'" in flat(result.stderr)
    path.write_text(json.dumps({**manifest, "ppi_sample": {"id": ""}}), "utf-8")
    result = _import(seeded_url, out / "samples.csv")
    assert result.exit_code == 3
    assert "ppi_sample.id '' is not a sample id" in flat(result.stderr)
    assert _stored(seeded_url) == {}


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (("--order", "lowest"), "--ppi-sample cannot be combined with --order lowest"),
        (("--max-similarity", "0.5"), "--ppi-sample cannot be combined with --max-similarity 0.5"),
        (("--flag", "format_regression"), "combined with --flag format_regression"),
        (("--changed-unjudged",), "cannot be combined with --changed-unjudged"),
        (("--fraction", "0.1", "--per-task-type", "3"), "--fraction 0.1 and --per-task-type 3"),
        (("--fraction", "2"), "--fraction 2.0 must be a number in (0, 1]"),
    ],
)
def test_export_refusals_name_the_option_and_value(
    seeded_url: str, tmp_path: Path, args: tuple[str, ...], named: str
) -> None:
    result = cli(
        "export", "--run", RUN_ID, "--out", tmp_path / "x", "--ppi-sample", "--database-url",
        seeded_url, *args,
    )  # fmt: skip
    assert result.exit_code == 3, result.output
    assert named in flat(result.stderr)
    assert not (tmp_path / "x").exists()


def test_dashboard_labels_are_chosen_by_hand(seeded_url: str) -> None:
    with Database(seeded_url) as db:
        (sample,) = Repository(db).samples_by_ids(RUN_ID, ["ex-00001"])
    assert make_label(sample, "same", "", "ana").sample is None


def test_a_moved_copy_imported_again_keeps_the_pairs_in_their_sample(
    seeded_url: str, tmp_path: Path
) -> None:
    """Membership is the pair's draw, not the file's: the same labels imported again from a
    copy away from its manifest (or relabelled on the dashboard) stay in the sample."""
    out = tmp_path / "sample"
    manifest = _export_sample(seeded_url, out, "--per-task-type", 2, "--seed", 5)
    sample = manifest["ppi_sample"]
    assert isinstance(sample, dict)
    labelled = _label_all(out / "samples.csv", [])
    assert _import(seeded_url, out / "samples.csv").exit_code == 0
    moved = tmp_path / "elsewhere" / "labelled.csv"
    moved.parent.mkdir()
    shutil.copy(out / "samples.csv", moved)
    again = _import(seeded_url, moved)
    assert again.exit_code == 0, again.output
    n = len(labelled)
    assert (
        f"{n} labels imported without a random sample of their own (no manifest.json beside "
        f"labelled.csv and no --manifest: not a random label sample): {n} are of pairs drawn "
        "in a random sample before and stay in it, 0 chosen by hand"
    ) in flat(again.stdout)
    assert set(_stored(seeded_url).values()) == {sample["id"]}


def test_the_manifest_of_another_draw_is_warned_about(seeded_url: str, tmp_path: Path) -> None:
    """A file labelled from one draw imported with the manifest of another draw of the same
    run: most rows are not in that manifest's sample, and the import says so."""
    first, second = tmp_path / "first", tmp_path / "second"
    mine = _export_sample(seeded_url, first, "--per-task-type", 2, "--seed", 5)["ppi_sample"]
    assert isinstance(mine, dict)
    n = len(mine["exchange_ids"])
    for seed in range(100, 140):  # another draw that shares fewer than half of the pairs
        shutil.rmtree(second, ignore_errors=True)
        other = _export_sample(seeded_url, second, "--per-task-type", 2, "--seed", seed)
        drawn = other["ppi_sample"]
        assert isinstance(drawn, dict)
        shared = set(mine["exchange_ids"]) & set(drawn["exchange_ids"])
        if len(shared) * 2 < n:
            break
    else:
        pytest.fail("no seed in 100..139 draws a mostly different sample")
    other = drawn
    _label_all(first / "samples.csv", [])
    result = _import(seeded_url, first / "samples.csv", "--manifest", second / "manifest.json")
    assert result.exit_code == 0, result.output
    assert (
        f"warning: only {len(shared)} of the file's {n} labels are of pairs in {other['id']}: is"
    ) in flat(result.stdout)
