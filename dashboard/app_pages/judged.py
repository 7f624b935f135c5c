"""Judged pairs: first the judge's figures (agreement with labels, flip and first-position
rates, whether it votes), then every quality judgement of the run, with its rationale, votes
and answers."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from shadoweval.application.judging import (
    JUDGE_QUALITY_COLUMNS,
    judge_quality_report,
    judge_quality_rows,
)
from shadoweval.application.run_views import JudgedPair, JudgedPairsPage, judged_pairs_view
from shadoweval.dashboard import loaders
from shadoweval.dashboard.context import current
from shadoweval.dashboard.formatting import count_noun, md_escape, plural
from shadoweval.dashboard.judged_view import (
    ALL,
    OUTCOME_CHOICES,
    SOURCE_CHOICES,
    judged_table,
    outcome_name,
    reference_cell,
    stratum_cell,
    vote_cell,
)
from shadoweval.dashboard.redaction import page_redactor
from shadoweval.errors import ShadowEvalError
from shadoweval.records import JudgementSource

PAGE_SIZE = 20
PAGE_KEY = "judged_page"
FILTER_KEY = "judged.filter"

ctx = current()
st.title("Judged pairs")
redact = page_redactor()


def _judge_quality() -> None:
    """The judge's figures first: per task type, agreement with labels (analysts' and
    references'), the flip and first-position rates, and whether it votes."""
    try:
        report = judge_quality_report(
            ctx.run,
            loaders.judgements(ctx.database_url, ctx.run_id),
            loaders.labels(ctx.database_url, ctx.run_id),
        )
    except ShadowEvalError as exc:
        st.error(f"Cannot read the judge's figures: {md_escape(str(exc))}")
        return
    rows = judge_quality_rows(report)
    if not rows:
        return
    floor = report["floor"]
    st.subheader("Does the judge earn its vote?")
    st.dataframe(
        pd.DataFrame(rows, columns=list(JUDGE_QUALITY_COLUMNS)),
        hide_index=True,
        key="judge_quality_table",
    )
    for unit in report["per_task_type"].values():
        if not unit["standing"]["votes"]:
            st.warning(md_escape(unit["standing"]["text"]))
    st.caption(
        "Agreement: of the pairs the judge judged that an analyst labelled or a reference "
        "checked, the share with the same outcome (better / tie / worse), with Cohen's kappa. "
        "Flip rate: of the pairs judged in both orders, the share whose outcome changed when "
        "the answers were swapped. First position: of the votes for one answer, the share "
        "for the answer shown first (50% without position bias). 95% Wilson intervals. The "
        f"judge votes in a task type unless its agreement is below "
        f"{100 * floor['min_agreement']:.0f}% (judge.min_agreement) on at least "
        f"{floor['min_agreement_labels']} labelled pairs (the pooled agreement where the task "
        "type has fewer); where it does not vote its judgements are not read and net harm "
        "holds."
    )


_judge_quality()

known_types = loaders.task_types(ctx.database_url, ctx.run_id, ctx.version.pairs)
type_choices = [ALL, *known_types]
if st.session_state.get("judged_task_type") not in (None, *type_choices):
    st.session_state["judged_task_type"] = ALL  # a run switch may leave a type it lacks

with st.container(border=True):
    cols = st.columns(3)
    task_type = cols[0].selectbox(
        "Task type",
        type_choices,
        format_func=lambda t: "all task types" if t == ALL else t,
        key="judged_task_type",
    )
    outcome = cols[1].selectbox(
        "Outcome",
        OUTCOME_CHOICES,
        format_func=lambda o: "all outcomes" if o == ALL else outcome_name(o),
        key="judged_outcome",
    )
    source = cols[2].selectbox(
        "Source",
        SOURCE_CHOICES,
        format_func=lambda s: "all sources" if s == ALL else s,
        key="judged_source",
    )

wanted = (ctx.run_id, task_type, outcome, source)
if st.session_state.get(FILTER_KEY) != wanted:
    st.session_state[FILTER_KEY] = wanted
    st.session_state[PAGE_KEY] = 1


def _read(page_number: int) -> JudgedPairsPage:
    return judged_pairs_view(
        ctx.repo,
        ctx.run,
        redact=redact,
        task_type=None if task_type == ALL else task_type,
        outcome=None if outcome == ALL else outcome,
        source=None if source == ALL else source,
        page=page_number,
        page_size=PAGE_SIZE,
        pairs=loaders.pairs(ctx.database_url, ctx.run_id, ctx.version.pairs),
        judgements=loaders.judgements(ctx.database_url, ctx.run_id),
        labels=loaders.labels(ctx.database_url, ctx.run_id),
    )


try:
    page = _read(int(st.session_state.get(PAGE_KEY, 1)))
    if page.page > page.pages:  # fewer judgements than when the page number was picked
        st.session_state[PAGE_KEY] = page.pages
        page = _read(page.pages)
except ShadowEvalError as exc:
    st.error(f"Cannot read the judgements: {md_escape(str(exc))}")
    st.stop()

if page.total == 0:
    st.info(
        "No judgements match. Pairs are judged by `shadow-eval judge run` (an LLM judge), by "
        "analysts (labels on the Samples page, or `shadow-eval labels import`) and by "
        "reference checkers (the reference import); the Samples page exports the changed "
        "pairs not judged yet."
    )
    st.stop()

st.markdown(
    f"**{count_noun(page.total, 'judgement')} {plural(page.total, 'matches', 'match')}** · "
    f"page {page.page:,} of {page.pages:,}"
)
if page.pages > 1:
    st.number_input("Page", min_value=1, max_value=page.pages, step=1, key=PAGE_KEY)

st.dataframe(judged_table(page), hide_index=True, placeholder="–", key="judged_table")
st.caption(
    "One row per judgement (a pair judged by several sources has several rows); used = the "
    "judgement the estimator reads (a human label wins over a reference check, which wins "
    "over the LLM judge). The judge sees each pair twice, once with the baseline's answer "
    "first and once with the candidate's: orders that disagree make a tie (position bias). "
    "Stratum is the pair's divergence stratum under the frozen policy. Texts are redacted."
)


def _card(item: JudgedPair) -> None:
    judgement = item.judgement
    with st.container(border=True):
        similarity = (
            "–"
            if item.sample is None or item.sample.similarity is None
            else f"{item.sample.similarity:.3f}"
        )
        st.markdown(
            f"**{md_escape(judgement.task_type)}** · `{judgement.exchange_id}` · "
            f"{judgement.source.value}: **{outcome_name(item.outcome)}**"
            f"{' (used)' if item.used else ''} · {stratum_cell(item)} · similarity {similarity}"
        )
        if judgement.outcome is None:
            st.error(f"failed: {md_escape(judgement.error or 'no reason stored')}")
        if judgement.rationale:
            st.text(f"Rationale: {judgement.rationale}")
        if judgement.source is JudgementSource.REFERENCE:
            st.caption(md_escape(reference_cell(item)))
        if judgement.votes:
            vote_cols = st.columns(2)
            for column, vote in zip(vote_cols, judgement.votes[:2], strict=False):
                shown_first = "baseline" if vote.order == "baseline_first" else "candidate"
                column.markdown(
                    f"**Vote, {shown_first} shown first: {md_escape(vote_cell(vote))}**"
                )
                if vote.rationale:
                    column.text(vote.rationale)
        sample = item.sample
        if sample is not None:
            sides = (
                ("Baseline (live)", sample.baseline_text, sample.baseline_tool_calls),
                ("Candidate (replay)", sample.candidate_text, sample.candidate_tool_calls),
            )
            for column, (title, text, calls) in zip(st.columns(2), sides, strict=True):
                column.markdown(f"**{title}**")
                column.text(text or ("(no text)" if calls else "(empty)"))
                if calls:
                    column.json(calls, expanded=False)


for item in page.pairs:
    _card(item)
