"""One pair on the Samples page: request, both answers side by side, word diff, label form.

Everything a model or a client wrote is shown as text (``st.text``, ``st.json``) or
through :func:`shadoweval.dashboard.word_diff.word_diff`, which escapes it: nothing captured is ever
rendered as Markdown or HTML. The page passes samples already redacted
(:func:`shadoweval.application.samples.redacted_page`), so the card shows no secret the export would
hide.
"""

from __future__ import annotations

from typing import Any

import orjson
import streamlit as st

from shadoweval.application.labels import save_label
from shadoweval.dashboard import loaders
from shadoweval.dashboard.context import LABELLER_KEY
from shadoweval.dashboard.formatting import count_noun, md_escape
from shadoweval.dashboard.labelling import LABEL_NAMES
from shadoweval.dashboard.word_diff import word_diff
from shadoweval.errors import ShadowEvalError
from shadoweval.records import LabelValue
from shadoweval.storage.samples import Sample

__all__ = ["FLASH_KEY", "label_keys", "render_sample"]

FLASH_KEY = "samples.flash"
"""Session key of the last label result: ``(exchange_id, "success" | "error", text)``."""


def label_keys(exchange_id: str) -> tuple[str, str, str]:
    """Widget keys of a sample's label form: (form, label radio, note)."""
    return f"label-form-{exchange_id}", f"label-value-{exchange_id}", f"label-note-{exchange_id}"


def _submit_label(database_url: str, sample: Sample) -> None:
    """Form callback: store the label picked for ``sample`` (the dashboard's only write)."""
    _, value_key, note_key = label_keys(sample.exchange_id)
    state = st.session_state
    try:
        label = save_label(
            loaders.repository(database_url),
            sample,
            state.get(value_key),
            str(state.get(note_key) or ""),
            str(state.get(LABELLER_KEY) or ""),
        )
    except ShadowEvalError as exc:
        state[FLASH_KEY] = (sample.exchange_id, "error", str(exc))
        return
    loaders.labels_changed()
    state[FLASH_KEY] = (
        sample.exchange_id,
        "success",
        f"Saved: {LABEL_NAMES[label.label]} by {label.labeller}",
    )


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            else:
                parts.append(orjson.dumps(part).decode())
        return "\n".join(parts)
    if content is None:
        return ""
    return orjson.dumps(content).decode()


def _messages(sample: Sample) -> None:
    if not sample.request_messages:
        st.caption("(the captured request has no message list)")
    for message in sample.request_messages:
        role = str(message.get("role", "?"))
        st.markdown(f"**{md_escape(role)}**")
        st.text(_content_text(message.get("content")))
        if message.get("tool_calls"):
            st.json(message["tool_calls"], expanded=False)
    if sample.request_params:
        st.caption("Request parameters")
        st.json(sample.request_params, expanded=False)


def _answer(title: str, text: str, tool_calls: list[dict[str, Any]], error: str | None) -> None:
    st.markdown(f"**{title}**")
    if error:
        st.error(f"replay error: {md_escape(error)}")
    if text:
        st.text(text)
    elif tool_calls:
        st.caption(f"no text: {len(tool_calls)} tool call{'' if len(tool_calls) == 1 else 's'}")
    else:
        st.text("(empty)")
    if tool_calls:
        st.json(tool_calls, expanded=True)


def _header(number: int, sample: Sample) -> str:
    similarity = "–" if sample.similarity is None else f"{sample.similarity:.3f}"
    noise = (
        "" if sample.noise_similarity is None else f" (noise floor {sample.noise_similarity:.3f})"
    )
    return (
        f"**{number}. {md_escape(sample.task_type)}** · `{sample.exchange_id}` · similarity "
        f"{similarity}{noise} · captured {sample.captured_at:%Y-%m-%d %H:%M:%S} UTC"
    )


def _label_form(database_url: str, sample: Sample) -> None:
    form_key, value_key, note_key = label_keys(sample.exchange_id)
    if sample.label is not None:
        latest = sample.label
        note = f": {md_escape(latest.note)}" if latest.note else ""
        st.caption(
            f"Latest label: **{LABEL_NAMES[latest.label]}** by {md_escape(latest.labeller)} "
            f"({latest.source}, {latest.labelled_at:%Y-%m-%d %H:%M} UTC){note}"
        )
    with st.form(form_key, border=False):
        st.radio(
            "Label",
            list(LabelValue),
            index=None,
            format_func=lambda v: LABEL_NAMES[LabelValue(v)],
            horizontal=True,
            key=value_key,
        )
        st.text_input("Note", key=note_key, placeholder="why (optional)")
        st.form_submit_button("Save label", on_click=_submit_label, args=(database_url, sample))
    flash = st.session_state.get(FLASH_KEY)
    if flash is not None and flash[0] == sample.exchange_id:
        del st.session_state[FLASH_KEY]
        (st.success if flash[1] == "success" else st.error)(md_escape(flash[2]))


def render_sample(database_url: str, number: int, sample: Sample) -> None:
    """Draw one sample in a bordered container (``number``: its position in the filter)."""
    with st.container(border=True):
        st.markdown(_header(number, sample))
        if sample.flags:
            st.caption("flags: " + ", ".join(f.value for f in sample.flags))
        with st.expander(f"Request ({count_noun(len(sample.request_messages), 'message')})"):
            _messages(sample)
        side_by_side, diff_tab = st.tabs(["Side by side", "Word diff"])
        with side_by_side:
            left, right = st.columns(2)
            with left:
                _answer("Baseline (live)", sample.baseline_text, sample.baseline_tool_calls, None)
            with right:
                _answer(
                    "Candidate (replay)",
                    sample.candidate_text,
                    sample.candidate_tool_calls,
                    sample.candidate_error_kind,
                )
        with diff_tab:
            diff = word_diff(sample.baseline_text, sample.candidate_text)
            st.caption(
                f"{count_noun(diff.removed, 'word')} only in the baseline (struck), "
                f"{diff.added:,} only in the candidate (highlighted), {diff.kept:,} kept"
                + (" — long answers: the tail is not aligned" if diff.truncated else "")
            )
            st.html(diff.html)
        _label_form(database_url, sample)
