"""Terminal rendering of summaries and verdicts (rich)."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import typer
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

from shadoweval.records import (
    MIN_RATE_STARTS,
    NOT_POWERED,
    POOLED,
    REPORT_ONLY,
    Check,
    CheckOutcome,
    Decision,
    Verdict,
)

if TYPE_CHECKING:
    import pandas as pd
    from rich.console import Console

    from shadoweval.application.candidates import CandidateComparison
    from shadoweval.storage import RunInfo

_STYLE = {
    CheckOutcome.PASS.value: "green",
    CheckOutcome.FAIL.value: "bold red",
    CheckOutcome.INCONCLUSIVE.value: "yellow",
    REPORT_ONLY: "dim",
    NOT_POWERED: "dim",
    "": "dim",
}
_DECISION_STYLE = {
    Decision.PROMOTE: "bold green",
    Decision.HOLD: "bold yellow",
    Decision.ROLLBACK: "bold red",
}


def _num(value: Any, fmt: str = "{:.3f}") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return fmt.format(value)


def _pct(x: float) -> str:
    """A rate as a short percentage: 1 decimal, without a trailing ``.0``."""
    return f"{x:.1%}".replace(".0%", "%")


def _pair(base: Any, cand: Any) -> str:
    if base is None or (isinstance(base, float) and math.isnan(base)):
        return "–"
    return f"{_pct(base)}→{_pct(cand)}"


_MARK = {
    "pass": "✓ pass",
    "fail": "✗ FAIL",
    "inconclusive": "? hold",
    REPORT_ONLY: "· report only",
    NOT_POWERED: "· not powered yet",
    "": "–",
}

# (header, priority): lower priority columns are dropped first when the table is too wide.
_SUMMARY_COLUMNS: tuple[tuple[str, int], ...] = (
    ("task type", 0),
    ("n", 0),
    ("sim", 1),
    ("noise", 6),
    ("p10", 7),
    ("fail", 1),
    ("infra", 3),
    ("format", 1),
    ("e2e p50×", 2),
    ("e2e p95×", 4),
    ("ttft p50×", 5),
    ("ttfc p50×", 6),
    ("tok×", 5),
    ("e2e A", 8),
    ("checks", 0),
)


def _summary_cells(row: Mapping[Hashable, Any]) -> list[str]:
    outcome = str(row["outcome"])
    return [
        "all (pooled)" if row["task_type"] == POOLED else str(row["task_type"]),
        str(row["n"]),
        _num(row["similarity_mean"], "{:.2f}"),
        _num(row.get("noise_similarity_mean"), "{:.2f}"),
        _num(row["similarity_p10"], "{:.2f}"),
        _pair(row["baseline_fail_rate"], row["candidate_fail_rate"]),
        _pair(row["baseline_infra_error_rate"], row["candidate_infra_error_rate"]),
        _pair(row["baseline_format_ok_rate"], row["candidate_format_ok_rate"])
        if row["format_n"]
        else "–",
        _num(row["e2e_p50_ratio"], "{:.2f}"),
        _num(row["e2e_p95_ratio"], "{:.2f}"),
        _num(row["ttft_p50_ratio"], "{:.2f}"),
        _num(row.get("ttfc_p50_ratio"), "{:.2f}"),
        _num(row["output_tokens_ratio"], "{:.2f}"),
        _num(row.get("e2e_cles"), "{:.2f}"),
        _MARK.get(outcome, outcome),
    ]


def summary_table(
    summary: pd.DataFrame, title: str = "Per task type", max_width: int | None = None
) -> Table:
    """A rich table of :func:`shadoweval.stats.summary.task_type_summary` (ratios are
    candidate/baseline).

    Columns: pairs; mean similarity, mean baseline-repeat similarity (the noise floor)
    and 10th-percentile similarity; error-or-empty rate (without infrastructure errors),
    infrastructure error rate and format-parse success rate, baseline → candidate; e2e
    p50/p95, TTFT p50, TTFC p50 (time to first visible content) and output-token ratios;
    the report-only common-language effect size of e2e latency (``e2e A`` =
    P(candidate slower), 0.5 = no tendency); the worst check outcome of the task type
    (``? hold``: a check is inconclusive; in a PROMOTE ``· report only`` or ``· not
    powered yet``, :meth:`~shadoweval.records.Verdict.check_status`). Columns with no
    value in any row are left out; when the table would be wider than ``max_width``, the
    least important columns go first (never task type, n or checks), so numbers are never
    cut.
    """
    from rich import box

    records = summary.to_dict(orient="records")
    rows = [_summary_cells(r) for r in records]
    keep = [
        i
        for i, (name, priority) in enumerate(_SUMMARY_COLUMNS)
        if priority == 0 or any(cells[i] != "–" for cells in rows)
    ]
    longest_task = max([len("task type")] + [len(cells[0]) for cells in rows])

    def build(columns: list[int], caption: str) -> Table:
        table = Table(
            title=title,
            title_justify="left",
            caption=caption,
            box=box.SIMPLE_HEAD,
            pad_edge=False,
            # a table of few columns still leaves its caption a readable width
            min_width=min(max_width or _CAPTION_MIN_WIDTH, _CAPTION_MIN_WIDTH) if caption else None,
        )
        for i in columns:
            name = _SUMMARY_COLUMNS[i][0]
            if name == "task type":
                # Folded only when even the priority-0 columns do not fit, never to slivers.
                table.add_column(name, overflow="fold", min_width=min(longest_task, 24))
            else:
                table.add_column(
                    name, justify="left" if name == "checks" else "right", no_wrap=True
                )
        for record, cells in zip(records, rows, strict=True):
            if record["task_type"] == POOLED:
                table.add_section()
            shown = [cells[i] for i in columns]
            outcome = str(record["outcome"])
            shown[-1] = f"[{_STYLE.get(outcome, '')}]{shown[-1]}[/]"
            table.add_row(*shown)
        return table

    caption = (
        "ratios × = candidate / baseline; rates baseline → candidate; noise = baseline vs "
        "its repeat; e2e A = P(candidate slower), report only"
    )
    if max_width is not None:
        while _natural_width(build(keep, "")) > max_width:
            droppable = [i for i in keep if _SUMMARY_COLUMNS[i][1] > 0]
            if not droppable:
                break
            keep.remove(max(droppable, key=lambda i: _SUMMARY_COLUMNS[i][1]))
    dropped = [name for i, (name, _) in enumerate(_SUMMARY_COLUMNS) if i not in keep]
    if max_width is not None and dropped:
        caption += f"; not shown (no value or too narrow): {', '.join(dropped)}"
    return build(keep, caption)


_CAPTION_MIN_WIDTH = 80
"""Characters a captioned summary table takes at least (where the terminal has them), so a
table of few columns does not wrap its caption one word per line."""


def _natural_width(table: Table) -> int:
    """The width ``table`` takes when nothing has to be folded (rich's own measure:
    padding, column separators and edges included)."""
    import io

    from rich.console import Console
    from rich.measure import Measurement

    console = Console(file=io.StringIO(), width=100_000)
    return Measurement.get(console, console.options, table).maximum


def _task(task_type: str) -> str:
    return "all (pooled)" if task_type == POOLED else task_type


def checks_title(verdict: Verdict) -> str:
    """The title of the verdict's table of checks that did not pass: in a PROMOTE they did
    not decide (report only, or not powered yet), so the title says so."""
    if verdict.decision is Decision.PROMOTE:
        return f"Checks that did not decide ({REPORT_ONLY} or {NOT_POWERED})"
    return "Checks that did not pass"


def checks_table(verdict: Verdict, *, only_not_passed: bool = True) -> Table:
    """A rich table of the verdict's checks (by default those that did not pass), each
    outcome as every face shows it (:meth:`~shadoweval.records.Verdict.check_status`).

    The reasons are long sentences; :func:`print_result` prints them below the table.
    """
    table = Table(
        title=checks_title(verdict) if only_not_passed else "Checks", title_justify="left"
    )
    for name in ("#", "task type", "metric", "estimate", "interval", "margin", "n", "outcome"):
        table.add_column(name, overflow="fold" if name in ("task type", "metric") else "ellipsis")
    for i, check in enumerate(_selected(verdict, only_not_passed), start=1):
        interval = (
            f"[{_num(check.ci_low)}, {_num(check.ci_high)}]"
            if check.ci_low is not None or check.ci_high is not None
            else "–"
        )
        status = verdict.check_status(check)
        table.add_row(
            str(i),
            _task(check.task_type),
            check.metric,
            _num(check.estimate),
            interval,
            _num(check.margin),
            str(check.n),
            f"[{_STYLE[status]}]{status}[/]",
        )
    return table


def counts_table(title: str, headers: Iterable[str]) -> Table:
    """A table titled ``title`` (left) with a column per header: the first (what a row
    names: a task type, a category) left-aligned, the others (counts, rates)
    right-aligned."""
    table = Table(title=title, title_justify="left")
    for index, header in enumerate(headers):
        table.add_column(header, justify="left" if index == 0 else "right")
    return table


def _selected(verdict: Verdict, only_not_passed: bool) -> list[Check]:
    return [c for c in verdict.checks if not (only_not_passed and c.outcome is CheckOutcome.PASS)]


def verdict_panel(verdict: Verdict, max_reasons: int = 6) -> Panel:
    """The decision with its leading reasons, coverage, the pairs left out of latency as
    cache hits (when any) and the policy hash."""
    reasons = list(verdict.reasons[:max_reasons])
    more = len(verdict.reasons) - len(reasons)
    lines = [f"[{_DECISION_STYLE[verdict.decision]}]{verdict.decision.value.upper()}[/]"]
    lines += [f"• {r}" for r in reasons]
    if more > 0:
        lines.append(f"… and {more} more reason(s)")
    cov = verdict.coverage
    lines.append(
        f"coverage: {cov.paired}/{cov.captured} paired ({cov.share:.1%}); "
        f"errored {cov.errored}, skipped {cov.skipped}, warm-up {cov.warmup}"
    )
    lines += coverage_lines(verdict)
    cached = verdict.latency_cache_hits
    if cached.pairs:
        lines.append(
            f"cache hits: {cached.pairs} pairs left out of latency "
            f"({cached.baseline} baseline, {cached.candidate} candidate answers from a cache)"
        )
    lines.append(f"policy {verdict.policy_hash[:12]} · look {verdict.look} · run {verdict.run_id}")
    return Panel("\n".join(lines), title="Verdict", title_align="left")


def coverage_lines(verdict: Verdict) -> list[str]:
    """``  by route: …`` and ``  by task type: …`` lines (paired / captured; skipped), each
    route that was not evaluated marked; none for a verdict stored before they existed."""
    cov = verdict.coverage
    lines: list[str] = []
    if cov.per_route:
        parts = []
        for route, c in sorted(cov.per_route.items()):
            part = f"{escape(route)} {c.paired}/{c.captured}"
            if c.skipped:
                part += f" ({c.skipped} skipped)"
            if c.captured and not c.paired:
                part = f"[bold yellow]{part} not evaluated[/]"
            parts.append(part)
        lines.append("  by route: " + ", ".join(parts))
    captured = {t: n for t, n in cov.per_task_type.items() if n > 0}
    if captured:
        paired = cov.paired_per_task_type
        lines.append(
            "  by task type: "
            + ", ".join(f"{escape(t)} {paired.get(t, 0)}/{n}" for t, n in sorted(captured.items()))
        )
    for replay_pass in cov.load_shortfalls()[:1]:
        lines.append(
            f"[bold yellow]  replay load: measured at {replay_pass.describe_load()}[/] "
            "(latency was compared at that load)"
        )
    return lines


def load_text(counts: Mapping[str, Any]) -> str:
    """A replay's pace and achieved start rate from its JSON counts:
    ``13.9/s of 500/s asked``, ``captured pace ×2: 3.1/s of 3.1/s``, ``12.0/s``."""
    achieved = counts.get("achieved_rate_per_s")
    asked = counts.get("asked_rate_per_s")
    starts = counts.get("measured_starts")
    rate = "–" if achieved is None else f"{achieved:.1f}/s"
    if achieved is not None and isinstance(starts, int) and starts < MIN_RATE_STARTS:
        rate = f"– ({starts} starts: too few for a rate)"  # a burst of a few is no load
    if counts.get("pace") == "capture":
        speed = counts.get("pace_speed") or 1.0
        of = f" of {asked:.1f}/s" if asked is not None else ""
        return f"captured pace ×{speed:g}: {rate}{of}"
    if asked is not None:
        return f"{rate} of {asked:g}/s asked"
    return rate


def load_warnings(counts: Mapping[str, Any]) -> list[str]:
    """The warnings a replay's JSON counts call for: a server that interrupts running
    streams under concurrency (``interruption_advice``), and measured requests that
    started below 95% of the asked rate (``rate_shortfall``)."""
    warnings: list[str] = []
    advice = counts.get("interruption_advice")
    if advice:
        warnings.append(f"replay interruptions: {advice}")
    if counts.get("rate_shortfall"):
        warnings.append(
            f"replay load: the measured requests started at {load_text(counts)} (below 95% "
            "of the asked rate): the latency checks will say they were measured under a "
            "different load; lower --rate, raise --concurrency, or check the target"
        )
    return warnings


def print_warnings(console: Console, warnings: list[str] | tuple[str, ...]) -> None:
    """Print each warning as ``warning: …`` (escaped, verbatim)."""
    for warning in warnings:
        console.print(
            f"[bold yellow]warning:[/] {escape(warning)}", highlight=False, soft_wrap=True
        )


CI_WIDTH = 160
"""Columns of output that is not a terminal (CI logs, a pipe) when ``COLUMNS`` is unset:
wide enough for the per-task table with every column and for ``--help``."""


def wide_console(*, stderr: bool = False) -> Console:
    """A console for tables: the terminal's width, or ``COLUMNS`` when set; when output is
    not a terminal and ``COLUMNS`` is unset (logs, CI), :data:`CI_WIDTH` columns rather
    than rich's 80."""
    import os

    from rich.console import Console

    console = Console(stderr=stderr)
    if not console.is_terminal and not os.environ.get("COLUMNS"):
        console = Console(stderr=stderr, width=max(console.width, CI_WIDTH))
    return console


def print_result(console: Console, summary: pd.DataFrame, verdict: Verdict) -> None:
    """Print the per-task table, the verdict and the checks that did not pass (in a
    PROMOTE: that did not decide, :func:`checks_title`)."""
    console.print(summary_table(summary, max_width=console.width))
    console.print(verdict_panel(verdict))
    selected = _selected(verdict, only_not_passed=True)
    if selected:
        console.print(checks_table(verdict))
        for i, check in enumerate(selected, start=1):
            console.print(f"  {i}. {_task(check.task_type)} / {check.metric}: {check.reason}")


_REASON_CELL_CHARS = 100
"""Characters of a leading reason shown in the side-by-side table (whole below it)."""


def _clipped(reason: str) -> str:
    """``reason`` cut at :data:`_REASON_CELL_CHARS` on a word, with "…"."""
    if len(reason) <= _REASON_CELL_CHARS:
        return reason
    return reason[:_REASON_CELL_CHARS].rsplit(" ", 1)[0] + " …"


def print_candidates(
    console: Console,
    rows: Sequence[tuple[str, RunInfo, Verdict]],
    comparison: CandidateComparison,
    decision: Decision,
) -> None:
    """Several candidates side by side: per candidate (``rows``: name, run, verdict, in
    ``comparison``'s order) its run, model, own decision and leading reason (clipped in the
    table, whole below it), the no-worse test (its p-value, Holm-adjusted) and the mean
    direction on its requests in points (``direction``, explained by a footnote under the
    table: it is not the gate's net harm); then ``decision`` and the pick (or the tie)
    with its method and level."""
    from shadoweval.application.candidates import DIRECTION_NOTE

    table = Table(title="candidates on one sample", title_justify="left")
    for column in ("candidate", "run", "model", "decision", "no worse", "p", "Holm p"):
        # Run ids are the next command's argument: folded whole, never clipped with "…".
        table.add_column(column, overflow="fold" if column in ("run", "model") else "ellipsis")
    table.add_column("requests", justify="right")
    table.add_column("direction", justify="right")
    table.add_column("leading reason")
    for (name, run, verdict), row in zip(rows, comparison.candidates, strict=True):
        table.add_row(
            escape(name),
            escape(run.run_id),
            escape(run.candidate.name),
            f"[{_DECISION_STYLE[verdict.decision]}]{verdict.decision.value.upper()}[/]",
            "[green]yes[/]" if row.no_worse else "no",
            f"{row.p_value:.3g}",
            f"{row.adjusted_p:.3g}",
            str(row.requests),
            "-" if math.isnan(row.direction_pp) else f"{row.direction_pp:+.1f} pp",
            escape(_clipped(verdict.reasons[0])) if verdict.reasons else "",
        )
    console.print(table)
    console.print(escape(DIRECTION_NOTE), highlight=False, soft_wrap=True)
    for name, _, verdict in rows:  # the leading reasons whole, one line each
        reasons = verdict.reasons
        if reasons and reasons[0] != _clipped(reasons[0]):
            console.print(f"{escape(name)}: {escape(reasons[0])}", highlight=False, soft_wrap=True)
    console.print(
        f"[{_DECISION_STYLE[decision]}]{decision.value.upper()}[/] {escape(comparison.summary)}",
        highlight=False,
    )
    console.print(f"method: {escape(comparison.method)}", highlight=False)


def print_error(console: Console, error: object) -> None:
    """Print ``error:`` and the message verbatim (escaped: brackets in paths stay as is) on
    one line, never wrapped at the console's width (a CI log grep finds it whole)."""
    console.print(f"[bold red]error:[/] {escape(str(error))}", highlight=False, soft_wrap=True)


@contextlib.contextmanager
def exit_on_error(console: Console, *also: type[Exception]) -> Iterator[None]:
    """Run the ``with`` block; on a :class:`~shadoweval.errors.ShadowEvalError` (or one of
    the exception types ``also``), print it on ``console`` (:func:`print_error`) and exit
    with :data:`~shadoweval.cli.exit_codes.EXIT_ERROR` (3).

    Raises:
        typer.Exit: exit status 3, after such an error (its traceback is not shown).
    """
    from shadoweval.cli.exit_codes import EXIT_ERROR
    from shadoweval.errors import ShadowEvalError

    caught: tuple[type[Exception], ...] = (ShadowEvalError, *also)
    try:
        yield
    except caught as exc:
        print_error(console, exc)
        raise typer.Exit(EXIT_ERROR) from None
