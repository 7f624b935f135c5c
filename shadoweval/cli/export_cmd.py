"""``shadow-eval export``: a stratified, redacted sample of a run's pairs for analysts.

Writes ``DIR/samples.<csv|jsonl|parquet>`` and ``DIR/manifest.json`` (run, policy hash,
filters, order, seed, counts per task type, redaction rules and hits) and prints the
counts per task type. Every text passes through the body redactor configured for the
capture sidecar (:func:`body_redaction`). Exit 0 on success, 3 on any error (the message
names the option and the value).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from shadoweval.cli.options import DatabaseUrlOpt, ExistingRunOpt
from shadoweval.cli.render import exit_on_error

if TYPE_CHECKING:
    from rich.console import Console

    from shadoweval.application.exporting import ExportResult

OutOpt = Annotated[
    str,
    typer.Option(
        "--out",
        metavar="DIR",
        help="Directory to write samples.<ext> and manifest.json into (created if needed; "
        "samples.<other ext> files of an earlier export there are removed).",
    ),
]
FormatOpt = Annotated[str, typer.Option("--format", help="File format: csv, jsonl or parquet.")]
PerTaskTypeOpt = Annotated[
    str | None,
    typer.Option(
        "--per-task-type",
        metavar="N",
        help="Most pairs exported per task type (1 <= N <= 1,000,000; default 20).",
    ),
]
FractionOpt = Annotated[
    str | None,
    typer.Option(
        "--fraction",
        metavar="F",
        help="Export a fraction F in (0, 1] of each task type's matching pairs instead of N: "
        "ceil(F x pairs), e.g. 0.1 takes 3 of 30 and 1 of 3. Not with --per-task-type.",
    ),
]
OrderOpt = Annotated[
    str | None,
    typer.Option(
        "--order",
        help="lowest (default): the N lowest-similarity pairs (pairs without a similarity "
        "first unless a similarity bound is set); random: N drawn with --seed.",
    ),
]
PpiSampleOpt = Annotated[
    bool,
    typer.Option(
        "--ppi-sample",
        help="The random label sample for prediction-powered inference of net harm: N (or "
        "--fraction F) drawn at random from ALL changed pairs of each task type, judged or "
        "not, with --seed (drawn and recorded when not given). Labels imported from it are "
        "marked with the sample's id; other labels count as chosen by hand. Refused with "
        "--order lowest, similarity bounds, --flag and --changed-unjudged.",
    ),
]
SeedOpt = Annotated[
    str | None,
    typer.Option(
        "--seed",
        metavar="N",
        help="Seed of the random draw, 0 to 2**63 - 1 (needed with --order random, refused "
        "with --order lowest).",
    ),
]
MinSimilarityOpt = Annotated[
    str | None,
    typer.Option(
        "--min-similarity", metavar="X", help="Only pairs with similarity >= X (in [-1, 1])."
    ),
]
MaxSimilarityOpt = Annotated[
    str | None,
    typer.Option(
        "--max-similarity",
        metavar="X",
        help="Only pairs with similarity <= X (in [-1, 1]); the usual way to pick the "
        "divergent band.",
    ),
]
TaskTypeOpt = Annotated[
    list[str] | None,
    typer.Option("--task-type", help="Only this task type (repeatable; default: all)."),
]
FlagOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--flag",
        help="Only pairs with this flag (repeatable: all must be set), e.g. "
        "format_regression, candidate_error, below_noise_floor.",
    ),
]
ChangedUnjudgedOpt = Annotated[
    bool,
    typer.Option(
        "--changed-unjudged",
        help="Only pairs that changed beyond the noise (under the run's frozen policy) and "
        "have no successful quality judgement yet (judge, human label or reference; a "
        "pair whose judgements all failed counts as not judged): what is left for the "
        "analysts to judge. Recorded in the manifest.",
    ),
]


RawCellsOpt = Annotated[
    bool,
    typer.Option(
        "--raw-cells",
        help="Write the CSV's cells as they are. By default a text cell that starts with =, "
        "+, -, @, a tab or a line break gets a leading ' (and text cells are quoted) so that "
        "a spreadsheet program does not run it as a formula (CSV injection); numbers are "
        "never escaped, JSONL and Parquet never. Recorded in the manifest (cells).",
    ),
]


def parse_number(text: str | None, option: str, kind: type[int] | type[float]) -> Any:
    """``text`` as an ``int`` or ``float`` (``None`` stays ``None``).

    Raises:
        ConfigError: not a number of that kind; the message names the option and value.
    """
    from shadoweval.errors import ConfigError

    if text is None:
        return None
    try:
        return kind(text.strip())
    except ValueError:
        what = "an integer" if kind is int else "a number"
        raise ConfigError(f"{option} {text!r} is not {what}", field=option, value=text) from None


def print_export(
    console: Console, result: ExportResult, paths: list[Path], removed: list[Path] | None = None
) -> None:
    """The counts per task type, the files written (and stale ones removed) and the
    redaction hits."""
    from rich.table import Table

    manifest = result.manifest
    table = Table(title=f"export of run {manifest['run_id']}", title_justify="left")
    table.add_column("task type")
    table.add_column("matching", justify="right")
    table.add_column("exported", justify="right")
    for task_type, counts in manifest["counts"].items():
        table.add_row(task_type, str(counts["matching"]), str(counts["exported"]))
    total = manifest["total"]
    table.add_row("total", str(total["matching"]), str(total["exported"]), style="bold")
    console.print(table)
    seed = f", seed {manifest['seed']}" if manifest["seed"] is not None else ""
    size = (
        f"up to {manifest['per_task_type']} per task type"
        if manifest.get("fraction") is None
        else f"a fraction {manifest['fraction']} of each task type (rounded up)"
    )
    console.print(
        f"order {manifest['order']}, {size}{seed}; policy {str(manifest['policy_hash'])[:12]}",
        highlight=False,
    )
    sample = manifest.get("ppi_sample")
    if sample is not None:
        console.print(
            f"random label sample {sample['id']} (PPI): {len(sample['exchange_ids'])} of "
            f"{total['matching']} changed pairs drawn, each task type apart; label them all "
            "and import them with `shadow-eval labels import` (the manifest beside the file "
            "marks them)",
            highlight=False,
        )
    filters = manifest["filters"]
    if filters.get("changed_unjudged"):
        console.print(
            f"only changed pairs not judged yet: {filters['exchange_ids']} in the run",
            highlight=False,
        )
    hits = manifest["redaction"]["counts"]
    applied = ", ".join(f"{rule} {n}" for rule, n in hits.items()) or "none"
    console.print(f"redactions: {applied}", highlight=False)
    for path in paths:
        console.print(f"wrote {path}", highlight=False)
    for path in removed or ():
        console.print(f"removed {path} (an earlier export in another format)", highlight=False)


def export_command(
    run_id: ExistingRunOpt,
    out_text: OutOpt,
    fmt: FormatOpt = "csv",
    per_task_type: PerTaskTypeOpt = None,
    fraction: FractionOpt = None,
    order: OrderOpt = None,
    seed: SeedOpt = None,
    min_similarity: MinSimilarityOpt = None,
    max_similarity: MaxSimilarityOpt = None,
    task_type: TaskTypeOpt = None,
    flag: FlagOpt = None,
    changed_unjudged: ChangedUnjudgedOpt = False,
    ppi_sample: PpiSampleOpt = False,
    raw_cells: RawCellsOpt = False,
    database_url: DatabaseUrlOpt = None,
) -> None:
    """Export a stratified sample of a run's pairs (N per task type), redacted.

    --order lowest takes the N lowest-similarity pairs of each task type (pairs without
    a similarity, i.e. an errored side, come first unless --min/--max-similarity is set);
    --order random draws N with numpy's default_rng(--seed) from the matching pairs.
    --changed-unjudged keeps only the pairs that changed and are not judged yet.
    --ppi-sample draws the random label sample from all changed pairs of each task type
    (--per-task-type N or --fraction F, --seed S or one drawn). The
    label and label_note columns are left empty for `shadow-eval labels import`. CSV
    cells that start like a spreadsheet formula get a leading ' unless --raw-cells.
    samples.<other ext> files of an earlier export in --out are removed (no other file
    is touched). Exit 3 on error.
    """
    from shadoweval.application.exporting import cli_option, export_to_directory, make_request
    from shadoweval.application.redaction import body_redaction
    from shadoweval.cli.options import existing_run
    from shadoweval.cli.render import wide_console
    from shadoweval.errors import ConfigError

    err = wide_console(stderr=True)
    with exit_on_error(err):
        if not out_text.strip():
            raise ConfigError(
                f"--out {out_text!r} is empty: name the directory to write the export into",
                field="--out",
                value=out_text,
            )
        out = Path(out_text)
        if out.exists() and not out.is_dir():
            raise ConfigError(
                f"--out {str(out)!r} exists and is not a directory", field="--out", value=out
            )
        request = make_request(
            run_id,
            per_task_type=parse_number(per_task_type, "--per-task-type", int),
            fraction=parse_number(fraction, "--fraction", float),
            ppi_sample=ppi_sample,
            order=order,
            seed=parse_number(seed, "--seed", int),
            fmt=fmt,
            task_types=task_type or (),
            flags=flag or (),
            min_similarity=parse_number(min_similarity, "--min-similarity", float),
            max_similarity=parse_number(max_similarity, "--max-similarity", float),
            changed_unjudged=changed_unjudged,
            raw_cells=raw_cells,
            names=cli_option,
        )
        redaction = body_redaction()
        with existing_run(database_url, run_id) as repo:
            written = export_to_directory(repo, request, out, redact=redaction, names=cli_option)
    print_export(wide_console(), written.result, written.paths, written.removed)


def register(app: typer.Typer) -> None:
    """Add ``export`` to the CLI."""
    app.command("export")(export_command)
