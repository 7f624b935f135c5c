"""``shadow-eval judge``: the pairwise LLM judge of a run's changed pairs.

* ``judge run --run-id ID [--send-pairs] [--max-per-task-type N]``: sends the run's
  changed pairs (at most N per task type in total, stratified by divergence; the
  policy's ``net_harm.max_judged_per_task_type`` by default) to the configured judge
  (``SHADOWEVAL_JUDGE__URL``, ``__MODEL``, ``__API_KEY``), each in both orders, and stores
  better / tie / worse with the rationale per pair
  (:func:`shadoweval.application.judging.run_judge`).
  Sending pairs is never a default: without ``SHADOWEVAL_JUDGE__SEND_PAIRS=true`` or
  ``--send-pairs`` it exits 3 and sends nothing. The first judge run freezes the judge
  (endpoint, model, prompt hash — which covers the response format,
  ``SHADOWEVAL_JUDGE__RESPONSE_FORMAT`` — and sampling) with the run; a different judge
  later exits 3 naming both; it exits 3 too when the run has no changed pair to judge or
  every judgement sent failed. Prints per task type: pairs, changed, already judged,
  selected, judged, better / tie / worse, failures, the judge's tokens, and the endpoint
  the pairs went to.
  Before sending anything it prints the plan (pairs, calls — two per pair —, estimated
  tokens from the captured usage or chars/4, the completion bound, money where the policy
  prices the judge, the budget). ``--budget-tokens N`` / ``--budget-usd X`` (or the
  policy's ``judge.budget_tokens`` / ``judge.budget_usd``) stop the run cleanly when the
  next pair's two calls — estimated, and scaled up by how far the estimates undershot the
  judge's usage so far — would exceed the budget: it prints "budget of N tokens reached
  after K of M pairs (T tokens used (+P preflight = T+P))" and exits **0** (the judged pairs
  are stored and the rest stay unjudged, as the gate already reads them; ``--json``:
  ``budget_outcome.status`` is ``budget_reached``). T is the pairs' tokens, as the table and
  ``judge summary`` count them; the preflight's P is apart (its answer is not stored) and
  printed under the table. A run that nevertheless ends above the cap says "budget of N
  tokens exceeded by X (…): estimates are approximate". A budget too small for the first
  pair sends nothing and exits 3.
  ``--dry-run`` prints the plan and sends nothing. A judge that is one of the arms (the
  baseline's or the candidate's model name, or the candidate's or the replica's URL) is
  refused (exit 3, naming the setting and value); a judge of an arm's family is named as a
  self-preference risk.
* ``judge summary --run-id ID [--json]``: the stored judgements by source, outcomes per
  task type, the frozen judge and endpoint, the judge's tokens, judge–human agreement,
  per task type and pooled the judge's agreement with labels (analysts' and
  references'), its position-flip and first-position rates (95% Wilson intervals) and
  whether it votes under the run's ``judge.min_agreement`` floor, and the self-preference
  risks of the frozen judge.

Exit 0 on success (a budget stop included), 3 on any error.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any

import typer

from shadoweval.cli.option_groups import takes_option_groups
from shadoweval.cli.options import SendPairsOpt, StoredRunOptions
from shadoweval.cli.render import exit_on_error

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from shadoweval.application.judging import JudgeRunReport
    from shadoweval.records import JudgeIdentity

judge_app = typer.Typer(
    name="judge",
    help="The pairwise LLM judge: judge a run's changed pairs, summarize judgements.",
    no_args_is_help=True,
)

RunJsonOpt = Annotated[
    bool,
    typer.Option(
        "--json",
        help="Print the judge run's report as JSON on stdout: the judge's identity and "
        "endpoint, whether this run froze it, per task type the pairs, changed, budget, "
        "sent, judged, better / tie / worse, order ties, failed, judge tokens and pairs not "
        "sent (budget), the first failures, the plan (pairs, calls, estimated tokens, "
        "budget), the budget outcome and the self-preference risks; the plan's lines go to "
        "stderr.",
    ),
]
SummaryJsonOpt = Annotated[
    bool,
    typer.Option(
        "--json",
        help="Print the judgement summary as JSON on stdout: stored and resolved "
        "judgements per source, outcomes per task type, the frozen judge, its endpoint "
        "and response format, judge tokens, judge–human agreement, and the "
        "self-preference risks.",
    ),
]

MaxPerTaskTypeOpt = Annotated[
    int | None,
    typer.Option(
        "--max-per-task-type",
        help="Judge budget per task type, in total (default: the policy's "
        "net_harm.max_judged_per_task_type).",
    ),
]
BudgetTokensOpt = Annotated[
    int | None,
    typer.Option(
        "--budget-tokens",
        help="Stop when the next pair's two judge calls would take the judge's tokens "
        "(prompt + completion, as its server reports them) past this many in this judge run "
        "(default: the policy's judge.budget_tokens; none: no cap).",
    ),
]
BudgetUsdOpt = Annotated[
    float | None,
    typer.Option(
        "--budget-usd",
        help="The same cap in US dollars, priced with the policy's "
        "judge.price_per_million_input_tokens and judge.price_per_million_output_tokens "
        "(default: the policy's judge.budget_usd).",
    ),
]
DryRunOpt = Annotated[
    bool,
    typer.Option(
        "--dry-run",
        help="Print the plan (pairs, calls, estimated tokens, budget) and send nothing.",
    ),
]


@judge_app.command("run")
@takes_option_groups
def run_command(
    run: StoredRunOptions,
    send_pairs: SendPairsOpt = False,
    max_per_task_type: MaxPerTaskTypeOpt = None,
    budget_tokens: BudgetTokensOpt = None,
    budget_usd: BudgetUsdOpt = None,
    dry_run: DryRunOpt = False,
    as_json: RunJsonOpt = False,
) -> None:
    """Judge the run's changed pairs with the configured LLM judge, both orders each.

    Before sending anything it prints the plan: pairs, judge calls (two per pair), the
    estimated tokens (captured usage where stored, else chars/4) and the budget. With a
    budget (--budget-tokens, --budget-usd or the policy's judge block) it stops cleanly
    when the next pair's two calls (estimated, scaled by how far the estimates undershot the
    judge's usage so far) would exceed it: the judged pairs are stored, the rest stay
    unjudged, and it says "budget of N tokens reached after K of M pairs (T tokens used (+P
    preflight = …))" and exits 0 (JSON: budget_outcome.status "budget_reached"); a run
    that ends above the cap anyway says "exceeded by X … estimates are approximate".

    Exit 3 on error (sending not allowed, no judge configured, a judge that is one of the
    arms — the candidate's or the baseline's model name or URL —, another judge frozen
    with the run, unknown run, unreachable database, a judge that fails the one preflight
    request with no connection or 401/403/404/405/407: the URL, status and body named),
    and when the run produced nothing to judge: no changed pair at all, every pair sent
    failed, or a budget too small for the first pair. Failed judge calls are kept: stored
    as failed judgements, counted and retried by the next judge run; when every call of a
    first judge run failed, the judge it froze is unfrozen again. A run whose changed
    pairs were all judged before exits 0 (nothing new to do).
    """
    from shadoweval.application.judging import JUDGE_COMMAND, check_judge_settings, run_judge
    from shadoweval.cli.exit_codes import EXIT_ERROR
    from shadoweval.cli.render import wide_console
    from shadoweval.config import load_settings

    err = wide_console(stderr=True)
    out = wide_console()
    plan_console = err if as_json else out

    def show_plan(report: JudgeRunReport) -> None:
        for line in [*(report.plan.lines() if report.plan else []), *report.self_preference]:
            plan_console.print(line, highlight=False, markup=False)

    with exit_on_error(err):
        settings = load_settings()
        check_judge_settings(settings.judge, send_pairs=send_pairs or dry_run)
        with run.opened() as repo:
            report = run_judge(
                repo,
                run.run_id,
                settings.judge,
                send_pairs=send_pairs,
                max_per_task_type=max_per_task_type,
                command=JUDGE_COMMAND,
                budget_tokens=budget_tokens,
                budget_usd=budget_usd,
                dry_run=dry_run,
                on_plan=show_plan,
            )
    for warning in report.warnings:
        err.print(f"warning: {warning}", highlight=False, markup=False)
    nothing = "" if dry_run else _nothing_judged(report)
    if nothing:
        err.print(f"judge run: {nothing}", highlight=False, markup=False)
    elif report.budget_message:
        err.print(f"judge run: {report.budget_message}", highlight=False, markup=False)
    if as_json:
        typer.echo(json.dumps(report.as_dict()))
        if nothing:
            raise typer.Exit(EXIT_ERROR)
        return
    if dry_run:
        out.print("dry run: nothing was sent and no judge was frozen", highlight=False)
        return
    identity = report.identity
    out.print(
        f"judge {identity.model!r} at {report.endpoint} ({_format_text(identity)}): "
        f"{report.selected} pairs sent"
        # A run whose every call failed released the judge it froze: say nothing of a freeze.
        f"{' (judge frozen with the run)' if report.first_use and not report.released else ''}",
        highlight=False,
        markup=False,
    )
    out.print(_run_table(report, run.run_id))
    if report.outcome.spend.preflight_tokens:
        out.print(
            f"preflight: 1 call, {report.outcome.spend.preflight_tokens} tokens (its answer is "
            "not stored, so neither this table nor judge summary counts it; the budget does)",
            highlight=False,
            markup=False,
        )
    for failure in report.failures:
        err.print(f"failed judgement {failure}", highlight=False, markup=False)
    if nothing:
        raise typer.Exit(EXIT_ERROR)


def _run_table(report: JudgeRunReport, run_id: str) -> Table:
    """The judge run's counts per task type."""
    from shadoweval.cli.render import counts_table

    headers = (
        "task type", "pairs", "changed", "judged before", "budget", "sent", "judged",
        "better", "tie", "worse", "order ties", "failed", "judge tokens in/out",
        "not sent (budget)",
    )  # fmt: skip
    table = counts_table(f"judge run of {run_id}", headers)
    for t in report.task_types.values():
        table.add_row(
            t.task_type,
            str(t.pairs),
            str(t.changed),
            str(t.already_judged),
            str(t.budget),
            str(t.selected),
            str(t.judged),
            str(t.better),
            str(t.tie),
            str(t.worse),
            str(t.disagreements),
            str(t.failed),
            f"{t.prompt_tokens}/{t.completion_tokens}",
            str(t.not_sent),
        )
    return table


def _nothing_judged(report: JudgeRunReport) -> str:
    """Why a judge run produced nothing (``""`` when it judged, or all was judged before)."""
    tallies = report.task_types.values()
    pairs = sum(t.pairs for t in tallies)
    changed = sum(t.changed for t in tallies)
    if changed == 0:
        return (
            f"nothing to judge: run {report.run_id} has {pairs} scored pairs and none "
            "changed (score the run first, or there is no divergence to judge)"
        )
    sent = report.selected
    if report.outcome.status == "budget_reached" and not sent:
        return f"nothing sent: {report.budget_message.replace(' after 0 of', ' before any of')}"
    if sent and not sum(t.judged for t in tallies):
        return (
            f"every one of the {sent} judgements failed (kept as failed judgements and "
            "retried by the next judge run); see the errors above"
            + ("; the judge was not frozen with the run" if report.released else "")
        )
    return ""


@judge_app.command("summary")
@takes_option_groups
def summary_command(
    run: StoredRunOptions,
    as_json: SummaryJsonOpt = False,
) -> None:
    """The run's quality judgements: by source (judge / reference / human) and task type,
    the frozen judge and its endpoint, the judge's tokens, judge–human agreement
    (Cohen's κ with a 95% CI), and per task type the judge's agreement with labels, its
    position-flip and first-position rates and whether it votes (below the policy's
    judge.min_agreement it does not). Exit 3 on error."""
    from shadoweval.application.judging import judgement_summary
    from shadoweval.cli.render import counts_table, wide_console

    err = wide_console(stderr=True)
    with exit_on_error(err), run.opened() as repo:
        summary = judgement_summary(repo, run.run_id)
    if as_json:
        typer.echo(json.dumps(summary.as_dict()))
        return
    out = wide_console()
    if summary.judge is None:
        out.print("judge: none has judged this run", highlight=False)
    else:
        out.print(
            f"judge {summary.judge.model!r} at {summary.endpoint} (prompt "
            f"{summary.judge.prompt_sha256[:12]}, {_format_text(summary.judge)}, "
            f"temperature {summary.judge.temperature:g}); "
            f"judge tokens {summary.judge_prompt_tokens} in / "
            f"{summary.judge_completion_tokens} out",
            highlight=False,
            markup=False,
        )
    stored = ", ".join(
        f"{source} {counts['ok']}" + (f" (+{counts['failed']} failed)" if counts["failed"] else "")
        for source, counts in summary.stored.items()
    )
    out.print(f"stored: {stored}", highlight=False, markup=False)
    table = counts_table(
        f"judgements of run {run.run_id} (as the gate uses them)",
        ("task type", "better", "tie", "worse", "judge", "reference", "human", "failed"),
    )
    for task_type, row in summary.per_task_type.items():
        table.add_row(
            task_type,
            *(
                str(row[k])
                for k in (
                    "candidate_better", "tie", "candidate_worse", "judge", "reference", "human",
                    "failed",
                )
            ),
        )  # fmt: skip
    out.print(table)
    if summary.agreement.get("n") or not summary.judge_quality.get("pooled"):
        # κ on analysts' labels only; with none, the quality table below (references too)
        # says what there is to say.
        out.print(str(summary.agreement["text"]), highlight=False, markup=False)
    for line in summary.self_preference:
        out.print(line, highlight=False, markup=False)
    _print_judge_quality(out, summary.judge_quality)


def _print_judge_quality(out: Console, report: dict[str, Any]) -> None:
    """The judge's agreement with labels, flip and first-position rates, and whether it
    votes, per task type and pooled; then why it does not vote where it does not."""
    from shadoweval.application.judging import JUDGE_QUALITY_COLUMNS, judge_quality_rows
    from shadoweval.cli.render import counts_table

    rows = judge_quality_rows(report)
    if not rows:
        return
    floor = report["floor"]
    table = counts_table(
        f"judge quality (95% Wilson intervals; floor judge.min_agreement "
        f"{100 * floor['min_agreement']:.0f}% from {floor['min_agreement_labels']} labelled "
        "pairs)",
        JUDGE_QUALITY_COLUMNS,
    )
    for row in rows:
        table.add_row(*(row[c] for c in JUDGE_QUALITY_COLUMNS))
    out.print(table)
    for unit in report["per_task_type"].values():
        if not unit["standing"]["votes"]:
            out.print(unit["standing"]["text"], highlight=False, markup=False)


def _format_text(identity: JudgeIdentity) -> str:
    """``text answers`` / ``json_schema answers`` / ``unknown response format``."""
    from shadoweval.application.judging import response_format_of

    fmt = response_format_of(identity)
    return "unknown response format" if fmt is None else f"{fmt} answers"


def register(app: typer.Typer) -> None:
    """Add the ``judge`` group to the CLI."""
    app.add_typer(judge_app, name="judge")
