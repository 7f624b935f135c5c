"""``shadow-eval labels``: human labels of pairs — import a labelled export, summarize.

* ``labels import FILE --run ID --labeller NAME``: reads the ``label`` / ``label_note``
  columns of an export (CSV, JSONL or Parquet) that an analyst filled in
  (:func:`shadoweval.application.labels.import_labelled_export`) and stores the labels: a pair's
  label by
  this labeller is replaced by a new non-empty one; a row left blank leaves a stored
  label alone (there is no way to delete a label by import). A row that cannot become a
  label (a bad label value, an exchange id that is not a pair of the run …) is stored as
  a rejected record (stage ``label_import``) with its reason and counted, unless an
  identical rejected record (same reason, location, message and row) is already stored
  for the run, as when the same file is imported twice; unlabelled rows are counted.
* ``labels summary --run ID [--json]``: per task type and pooled, the labelled pairs
  (each counted once, with its most recent label), the labels given, and the
  candidate's win and loss rates over pairs with 95% Wilson intervals
  (:func:`shadoweval.application.labels.label_rates`).

* ``labels import-reference --preset bfcl --baseline-scores DIR --candidate-scores DIR
  --run ID``: per-item reference correctness of both sides from a ground-truth checker —
  BFCL's official score files (``score/<model>/<category>_score.json``) of the baseline
  and the candidate model — stored as ``reference`` judgements of the run's pairs
  (:func:`shadoweval.application.judging.import_reference`): better when only the candidate passes,
  worse when only the baseline passes, else tie. Pairs are matched to BFCL items by the
  imported table row; pairs and items that match nothing are counted.

Exit 0 on success, 3 on any error — and 3 when the input produced nothing (``labels
import``: no row of the file became a label; ``labels import-reference``: no reference
judgement was stored), with a message saying so: a CI step that imports nothing has
failed, whatever it counted.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from shadoweval.cli.option_groups import takes_option_groups
from shadoweval.cli.options import DatabaseUrlOpt, ExistingRunOpt, StoredRunOptions
from shadoweval.cli.render import exit_on_error

if TYPE_CHECKING:
    from rich.console import Console

    from shadoweval.application.labels import LabelImport, LabelImportResult

labels_app = typer.Typer(
    name="labels",
    help="Human labels of pairs: import a labelled export or reference correctness, "
    "summarize win/loss rates.",
    no_args_is_help=True,
)

FileArg = Annotated[
    Path,
    typer.Argument(
        help="The labelled export: samples.csv, samples.jsonl or samples.parquet, or the "
        "export's zip (dashboard or API download)."
    ),
]
ManifestOpt = Annotated[
    Path | None,
    typer.Option(
        "--manifest",
        metavar="PATH",
        help="The export's manifest.json (default: the one inside the zip, else the one "
        "beside FILE). When it records a random label sample (export --ppi-sample), the "
        "labels of its pairs are marked with the sample's id; all others count as chosen "
        "by hand.",
    ),
]
LabellerOpt = Annotated[
    str,
    typer.Option(
        "--labeller", help="Who labelled (stored with every label; at most 200 characters)."
    ),
]


def _sample_line(result: LabelImportResult, file: Path) -> str:
    """How many imported labels are in the random label sample, how many chosen by hand
    (less those of pairs drawn in a sample before, which stay in it), and a warning when
    most of the file's rows are not in the manifest's sample (the wrong ``--manifest``)."""
    n = len(result.imported.labels)
    kept = result.kept_sample
    manifest = result.manifest
    why = (
        f"no manifest.json beside {file.name} and no --manifest: not a random label sample"
        if manifest is None
        else f"manifest {manifest.where} records no random label sample"
    )
    if manifest is None or manifest.sample is None:
        if not kept:
            return f"{n} labels imported: all chosen by hand ({why})"
        return (
            f"{n} labels imported without a random sample of their own ({why}): {kept} are of "
            f"pairs drawn in a random sample before and stay in it, {n - kept} chosen by hand"
        )
    sample = manifest.sample
    line = (
        f"{n} labels imported: {result.in_sample} in random sample {sample.sample_id} (PPI), "
        f"{result.by_hand} chosen by hand"
    )
    if kept:
        line += f" ({kept} of them of pairs drawn in a random sample before: they stay in it)"
    sampled = {label.exchange_id for label in result.imported.labels if label.sample}
    missing = len(sample.exchange_ids - sampled)
    if missing:
        line += (
            f"; {missing} of the sample's {len(sample.exchange_ids)} pairs have no stored label "
            "from this file (unlabelled or rejected rows)"
        )
    if n and result.in_sample * 2 < n:
        line += (
            f"; warning: only {result.in_sample} of the file's {n} labels are of pairs in "
            f"{sample.sample_id}: is {manifest.where} the manifest of this export?"
        )
    return line


def _print_import(
    console: Console, err: Console, imported: LabelImport, stored: int, skipped: int
) -> None:
    reasons: dict[str, int] = {}
    for row in imported.rejected:
        reasons[row.reason] = reasons.get(row.reason, 0) + 1
    by_reason = ", ".join(f"{reason} {n}" for reason, n in sorted(reasons.items()))
    console.print(
        f"{imported.rows} rows read: {stored} labels stored, {len(imported.rejected)} rejected"
        f"{f' ({by_reason})' if by_reason else ''}, {imported.unlabelled} unlabelled",
        highlight=False,
    )
    if skipped:
        console.print(
            f"{skipped} rejected rows were already stored by an earlier import (not stored again)",
            highlight=False,
        )
    for row in imported.rejected[:10]:
        err.print(f"rejected {row.reason}: {row.detail}", highlight=False, markup=False)
    if len(imported.rejected) > 10:
        err.print(f"… and {len(imported.rejected) - 10} more (stored as rejected records)")


@labels_app.command("import")
def import_command(
    file: FileArg,
    run_id: ExistingRunOpt,
    labeller: LabellerOpt,
    manifest: ManifestOpt = None,
    database_url: DatabaseUrlOpt = None,
) -> None:
    """Store the labels an analyst wrote into an export of a run.

    Only exchange_id, run_id, label and label_note are read (a CSV may be separated by
    ',', ';' or tab). Labels: candidate_better, candidate_worse, same, both_bad (case and
    hyphens forgiven). A new label replaces this labeller's earlier label of the pair;
    rows without a label are skipped and counted (a stored label stays). Rows that
    cannot be stored are kept as rejected records with their reason and counted (once,
    however often the same file is imported); a CSV row whose cell count is not the
    header's is one of them, named by file:line. FILE may be the export's zip. When the
    export's manifest (--manifest, the zip's, or manifest.json beside FILE) records a
    random label sample (export --ppi-sample) of this run, the labels of its pairs are
    marked with the sample's id (for prediction-powered inference); rows the analyst
    added, and every label without such a manifest, count as chosen by hand. Exit 3 on
    error, and when no row became a label (nothing was imported).
    """
    from shadoweval.application.labels import import_labelled_export
    from shadoweval.cli.exit_codes import EXIT_ERROR
    from shadoweval.cli.options import existing_run
    from shadoweval.cli.render import wide_console
    from shadoweval.errors import ConfigError

    err = wide_console(stderr=True)
    with exit_on_error(err):
        if file.is_dir():
            raise ConfigError(
                f"FILE {str(file)!r} is a directory; give the labelled export inside it "
                "(samples.csv, samples.jsonl or samples.parquet)",
                field="file",
                value=file,
            )
        if not file.is_file():
            what = "is not a regular file" if file.exists() else "does not exist"
            raise ConfigError(f"FILE {str(file)!r} {what}", field="file", value=file)
        with existing_run(database_url, run_id) as repo:
            result = import_labelled_export(
                repo, file, run_id=run_id, labeller=labeller, manifest=manifest
            )
    _print_import(wide_console(), err, result.imported, result.stored, result.skipped)
    if result.imported.labels:
        wide_console().print(_sample_line(result, file), highlight=False, markup=False)
    if result.stored == 0:
        imported = result.imported
        err.print(
            f"labels import: nothing imported: no row of {file.name} became a label "
            f"({imported.rows} rows: {len(imported.rejected)} rejected, "
            f"{imported.unlabelled} unlabelled)",
            highlight=False,
            markup=False,
        )
        raise typer.Exit(EXIT_ERROR)


PresetOpt = Annotated[
    str, typer.Option("--preset", help="Reference format: bfcl (BFCL's official score files).")
]


ReferenceJsonOpt = Annotated[
    bool,
    typer.Option(
        "--json",
        help="Print the reference import as JSON on stdout: the preset, judgements stored, "
        "the run's pairs, pairs without a BFCL item, without scores (per category) or out "
        "of range, and per category the items, matched, better / tie / worse and the "
        "official accuracies.",
    ),
]
SummaryJsonOpt = Annotated[
    bool,
    typer.Option(
        "--json",
        help="Print the label summary as JSON on stdout: the run, its labels, and per task "
        "type and pooled the labelled pairs, the label counts, and the win and loss rates "
        "with their 95% Wilson intervals.",
    ),
]


@labels_app.command("import-reference")
def import_reference_command(
    run_id: ExistingRunOpt,
    baseline_scores: Annotated[
        Path,
        typer.Option(
            "--baseline-scores",
            help="The baseline model's official score folder, e.g. "
            "bfcl/score/gpt-4o-2024-05-13-FC.",
        ),
    ],
    candidate_scores: Annotated[
        Path,
        typer.Option(
            "--candidate-scores",
            help="The candidate model's official score folder, e.g. "
            "bfcl/score/gpt-4o-2024-08-06-FC.",
        ),
    ],
    preset: PresetOpt = "bfcl",
    database_url: DatabaseUrlOpt = None,
    as_json: ReferenceJsonOpt = False,
) -> None:
    """Store per-item reference correctness of both sides as reference judgements.

    An item passes unless its score file lists it as failed. Each pair of the run is
    matched to its BFCL item by the row its exchange was imported from; pairs without a
    BFCL origin and items without a pair are counted, never dropped silently. Importing
    again replaces the run's reference judgements. Exit 3 on error, and when no reference
    judgement was stored (no pair matched an item with scores on both sides).
    """
    from shadoweval.application.judging import import_reference
    from shadoweval.cli.exit_codes import EXIT_ERROR
    from shadoweval.cli.options import existing_run
    from shadoweval.cli.render import counts_table, wide_console

    err = wide_console(stderr=True)
    with exit_on_error(err), existing_run(database_url, run_id) as repo:
        result = import_reference(
            repo,
            run_id,
            preset=preset,
            baseline_scores=baseline_scores,
            candidate_scores=candidate_scores,
        )
    nothing = result.stored == 0
    if nothing:
        err.print(
            f"labels import-reference: nothing imported: none of the {result.pairs} pairs of "
            f"run {run_id} matched a {preset} item with scores for both models",
            highlight=False,
            markup=False,
        )
    if as_json:
        from dataclasses import asdict

        typer.echo(json.dumps(asdict(result), default=str))
        if nothing:
            raise typer.Exit(EXIT_ERROR)
        return
    out = wide_console()
    out.print(
        f"{result.pairs} pairs in run {run_id}: {result.stored} reference judgements stored; "
        f"{result.pairs_without_item} pairs without a {preset} item, "
        f"{sum(result.pairs_without_scores.values())} in a category without scores on one "
        f"side, {result.pairs_out_of_range} beyond a category's items",
        highlight=False,
        markup=False,
    )
    headers = (
        "category", "items", "matched", "not in run", "baseline acc.", "candidate acc.",
        "better", "tie", "worse",
    )  # fmt: skip
    table = counts_table(f"reference correctness ({preset}) of run {run_id}", headers)
    for tally in result.categories.values():
        table.add_row(
            tally.category,
            str(tally.items),
            str(tally.matched),
            str(tally.not_in_run),
            _num(tally.baseline_accuracy, "{:.3f}"),
            _num(tally.candidate_accuracy, "{:.3f}"),
            str(tally.better),
            str(tally.tie),
            str(tally.worse),
        )
    out.print(table)
    if nothing:
        raise typer.Exit(EXIT_ERROR)


def _num(value: Any, fmt: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return fmt.format(value)


def _rate(row: dict[str, Any], name: str) -> str:
    return (
        f"{_num(row[f'{name}_rate'], '{:.1%}')} "
        f"[{_num(row[f'{name}_low'], '{:.1%}')}, {_num(row[f'{name}_high'], '{:.1%}')}]"
    )


@labels_app.command("summary")
@takes_option_groups
def summary_command(
    run: StoredRunOptions,
    as_json: SummaryJsonOpt = False,
) -> None:
    """Per task type: labelled pairs (n), labels given, and the candidate's win / loss
    rate with 95% Wilson intervals (win = candidate_better / n, loss = candidate_worse /
    n). A pair counts once, with its most recent label (any labeller; at equal times the
    labeller name that sorts first). Exit 3 on error."""
    from shadoweval.application.labels import label_rates
    from shadoweval.application.reports import json_records
    from shadoweval.cli.render import counts_table, wide_console
    from shadoweval.records import POOLED

    err = wide_console(stderr=True)
    with exit_on_error(err), run.opened() as repo:
        labels = repo.load_labels(run.run_id)
    records = json_records(label_rates(labels))
    if as_json:
        typer.echo(json.dumps({"run_id": run.run_id, "labels": len(labels), "summary": records}))
        return
    table = counts_table(
        f"labels of run {run.run_id}",
        ("task type", "pairs", "labels", "better", "worse", "same", "both bad"),
    )
    table.add_column("win rate [95% CI]", justify="right")
    table.add_column("loss rate [95% CI]", justify="right")
    for row in records:
        table.add_row(
            "all (pooled)" if row["task_type"] == POOLED else str(row["task_type"]),
            str(row["n"]),
            str(row["labels"]),
            str(row["candidate_better"]),
            str(row["candidate_worse"]),
            str(row["same"]),
            str(row["both_bad"]),
            _rate(row, "win"),
            _rate(row, "loss"),
        )
    wide_console().print(table)


def register(app: typer.Typer) -> None:
    """Add the ``labels`` group to the CLI."""
    app.add_typer(labels_app, name="labels")
