"""Chat-template marker leakage."""

from __future__ import annotations

import pytest

from shadoweval.compare.leakage import TEMPLATE_MARKERS, template_leaks


def test_markers_are_sorted_unique_strings() -> None:
    text = "<|im_start|>assistant\nHi<|im_end|>\n<|im_start|>user [INST] x [/INST] [INST]"
    assert template_leaks(text) == ("<|im_end|>", "<|im_start|>", "[/INST]", "[INST]")


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("Done.<|eot_id|><|start_header_id|>user<|end_header_id|>", 3),
        ("<start_of_turn>model\nHi<end_of_turn>", 2),
        ("<|assistant|>Hi<|end|><|user|>", 3),
        ("Answer<｜end▁of▁sentence｜><｜User｜>next", 2),
        ("text</s>", 1),
        ("<|endoftext|>", 1),
    ],
)
def test_known_templates(text: str, found: int) -> None:
    leaks = template_leaks(text)
    assert len(leaks) == found
    assert all(marker in text for marker in leaks)


@pytest.mark.parametrize(
    "text",
    [
        None,
        "",
        "A normal answer with <b>HTML</b>, [links](x) and <s>struck</s>... wait.",
        "<|IM_START|> is not the marker (case matters)",
        "[inst] lower case",
    ],
)
def test_no_false_positives(text: str | None) -> None:
    found = template_leaks(text)
    if text and "</s>" in text:
        assert found == ("</s>",)  # documented: HTML's strikethrough close tag also matches
    else:
        assert found == ()


def test_marker_list_has_no_duplicates() -> None:
    assert len(set(TEMPLATE_MARKERS)) == len(TEMPLATE_MARKERS)
