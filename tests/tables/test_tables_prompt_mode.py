"""BFCL prompt-mode models and the shapes real result files hold (issue 29, items 4 and 5).

Small fixtures written here, and the real prompt-mode pair of ../shared/data/bfcl
(NousResearch Hermes-2-Pro Mistral-7B → Llama-3-8B: only ``id`` and ``result``, the calls
written as ``<tool_call>`` text blocks).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import orjson
import pytest

from shadoweval.tables import BfclLanguage, load_recorded_rows
from shadoweval.tables.json_numbers import loads_keeping_numbers
from shadoweval.tables.plain_reader import read_plain_table
from shadoweval.tables.prompt_calls import hermes_tool_calls
from shadoweval.tables.reader import read_table

HERMES = ("NousResearch_Hermes-2-Pro-Mistral-7B", "NousResearch_Hermes-2-Pro-Llama-3-8B")
STEM = "gorilla_openfunctions_v1_test_simple"
FUNCTION = {
    "name": "calculate_triangle_area",
    "description": "Area of a triangle.",
    "parameters": {
        "type": "dict",
        "properties": {"base": {"type": "integer"}, "height": {"type": "integer"}},
        "required": ["base", "height"],
    },
}


def _bfcl_tree(tmp_path: Path, results: list[dict[str, object]], category: str = "simple") -> Path:
    """A BFCL layout (result/<model>/, data/) with one category; returns the model folder."""
    stem = f"gorilla_openfunctions_v1_test_{category}"
    data = tmp_path / "data"
    model = tmp_path / "result" / "some-prompt-model"
    data.mkdir(parents=True)
    model.mkdir(parents=True)
    questions = [
        {"id": r["id"], "question": f"question {i}", "function": FUNCTION}
        for i, r in enumerate(results)
    ]
    (data / f"{stem}.json").write_text("".join(json.dumps(q) + "\n" for q in questions))
    (model / f"{stem}_result.json").write_text("".join(json.dumps(r) + "\n" for r in results))
    return model


def _call_line(arguments: str, name: str = "calculate_triangle_area") -> str:
    return f'<tool_call>\n{{"arguments": {arguments}, "name": "{name}"}}\n</tool_call>\n'


# ----------------------------------------------------------------- (a) no latency column


def test_result_without_latency_or_token_columns_is_imported(tmp_path: Path) -> None:
    model = _bfcl_tree(
        tmp_path, [{"id": "simple_0", "result": _call_line('{"base": 10, "height": 5}')}]
    )
    loaded = load_recorded_rows(model, preset="bfcl")
    assert loaded.rejected == []
    (row,) = loaded.rows
    assert row.latency_ms is None  # unknown, never zero
    assert row.prompt_tokens is None
    assert row.completion_tokens is None
    assert any("latency" in note and "unknown" in note for note in loaded.notes)
    assert any("some-prompt-model" in note for note in loaded.notes)


def test_result_with_latency_has_no_unknown_note(shared_data: Path) -> None:
    loaded = load_recorded_rows(
        shared_data / "bfcl/result/gpt-4o-2024-05-13-FC" / f"{STEM}_result.json",
        preset="bfcl",
        prompts=shared_data / f"bfcl/data/{STEM}.json",
    )
    assert loaded.notes == []
    assert all(row.latency_ms is not None for row in loaded.rows)


# ------------------------------------------------------- (b) tool calls written as text


def test_hermes_blocks_become_tool_calls(tmp_path: Path) -> None:
    two = _call_line('{"base": 10, "height": 5}') + _call_line('{"base": 3, "height": 4}')
    model = _bfcl_tree(
        tmp_path,
        [
            {"id": "simple_0", "result": _call_line('{"base": 10, "height": 5}')},
            {"id": "simple_1", "result": "Let me compute.\n" + two},
            {"id": "simple_2", "result": "I cannot help with that."},
        ],
    )
    first, second, prose = load_recorded_rows(model, preset="bfcl").rows
    assert first.output_text is None
    assert [(c.index, c.name, json.loads(c.arguments)) for c in first.tool_calls] == [
        (0, "calculate_triangle_area", {"base": 10, "height": 5})
    ]
    assert second.output_text == "Let me compute."
    assert [json.loads(c.arguments) for c in second.tool_calls] == [
        {"base": 10, "height": 5},
        {"base": 3, "height": 4},
    ]
    assert prose.output_text == "I cannot help with that."
    assert prose.tool_calls == ()


def test_hermes_block_the_leaderboard_cannot_decode_is_a_call_that_does_not_parse() -> None:
    decoded = hermes_tool_calls(_call_line('{"number": 450, "formatted": True}', "primes"))
    assert decoded is not None
    (call,) = decoded.calls
    assert call.name == "primes"
    assert decoded.undecodable == 1
    with pytest.raises(orjson.JSONDecodeError, match="unexpected character"):
        orjson.loads(call.arguments)


def test_hermes_quote_replacement_and_java_casts_follow_the_leaderboard() -> None:
    single = hermes_tool_calls("<tool_call>\n{'arguments': {'a': 'x'}, 'name': 'f'}\n</tool_call>")
    assert single is not None
    assert single.undecodable == 0
    assert json.loads(single.calls[0].arguments) == {"a": "x"}
    java = hermes_tool_calls(_call_line('{"flag": true, "items": ["a", "b"]}', "g"), "java")
    assert java is not None
    assert json.loads(java.calls[0].arguments) == {"flag": "True", "items": "['a', 'b']"}


# ------------------------------------------------ (c) text parts, mixed, huge numbers


def test_list_of_text_parts_and_text_mixed_with_calls(tmp_path: Path) -> None:
    model = _bfcl_tree(
        tmp_path,
        [
            {"id": "simple_0", "result": ["I cannot ", "do that."]},
            {
                "id": "simple_1",
                "result": ["Calling it.", {"calculate_triangle_area": '{"base": 1, "height": 2}'}],
            },
        ],
    )
    loaded = load_recorded_rows(model, preset="bfcl")
    assert loaded.rejected == []
    parts, mixed = loaded.rows
    assert parts.output_text == "I cannot \ndo that."
    assert parts.tool_calls == ()
    assert mixed.output_text == "Calling it."
    assert [c.name for c in mixed.tool_calls] == ["calculate_triangle_area"]


def test_a_list_item_that_is_neither_text_nor_a_call_is_rejected_and_kept(tmp_path: Path) -> None:
    model = _bfcl_tree(tmp_path, [{"id": "simple_0", "result": ["text", 42]}])
    loaded = load_recorded_rows(model, preset="bfcl")
    assert loaded.rows == []
    (rejected,) = loaded.rejected
    assert rejected.reason == "bad_tool_calls"
    assert "item 1" in rejected.detail
    assert rejected.raw["result"] == ["text", 42]


def test_numbers_beyond_float_range_are_kept_exactly_as_text(tmp_path: Path) -> None:
    big = str(math.factorial(1000))
    assert len(big) == 2568
    document = '{"id": "simple_0", "execution_result": [' + big + ", 1e999, 3]}"
    assert loads_keeping_numbers(document) == {
        "id": "simple_0",
        "execution_result": [big, "1e999", 3],
    }
    line = (
        '{"id": "simple_0", "result": [{"calculate_triangle_area": {"base": '
        + big
        + ', "height": 2}}]}\n'
    )
    model = _bfcl_tree(tmp_path, [{"id": "simple_0", "result": "placeholder"}])
    (model / f"{STEM}_result.json").write_text(line)
    for frame in (
        read_table(model / f"{STEM}_result.json"),
        read_plain_table(model / f"{STEM}_result.json", "jsonl"),
    ):
        (record,) = frame.to_dict(orient="records")
        assert record["result"][0]["calculate_triangle_area"]["base"] == big
    (row,) = load_recorded_rows(model, preset="bfcl").rows
    assert json.loads(row.tool_calls[0].arguments) == {"base": big, "height": 2}


# ------------------------------------------------------------- the real prompt-mode pair


@pytest.mark.parametrize("model", HERMES)
def test_real_prompt_mode_results_import_every_row(shared_data: Path, model: str) -> None:
    loaded = load_recorded_rows(shared_data / "bfcl/result" / model, preset="bfcl")
    assert loaded.rejected == []
    assert loaded.rows_read == 1700
    assert all(row.latency_ms is None for row in loaded.rows)
    assert sum(1 for row in loaded.rows if row.tool_calls) > 1500
    assert any(model in note and "latency" in note for note in loaded.notes)


def _score_lines(shared_data: Path, model: str) -> list[tuple[str, dict[str, object]]]:
    out = []
    for path in sorted((shared_data / "bfcl/score" / model).glob("*_score.json")):
        category = path.name.removesuffix("_score.json")
        out += [(category, json.loads(line)) for line in path.read_text().splitlines()[1:]]
    return out


@pytest.mark.parametrize("model", HERMES)
def test_decoding_matches_the_score_files(shared_data: Path, model: str) -> None:
    """Every decoded form the official score files show is what the import decodes, and
    every item the official decoder failed on holds a call that does not parse."""
    seen: Counter[str] = Counter()
    for category, line in _score_lines(shared_data, model):
        raw = line.get("model_result_raw", line.get("model_result"))
        decoded = line.get("model_result_decoded", line.get("decoded_result"))
        language: BfclLanguage = "python"
        if category in ("java", "javascript"):
            language = "java" if category == "java" else "javascript"
        assert isinstance(raw, str)
        mine = hermes_tool_calls(raw, language)
        if decoded is not None and not category.startswith("executable") and category != "rest":
            calls = [] if mine is None else mine.calls
            assert [{c.name: json.loads(c.arguments)} for c in calls] == decoded, raw
            assert mine is None or mine.undecodable == 0
            seen["decoded"] += 1
        if str(line["error_type"]).endswith("decoder_failed"):
            assert mine is not None, raw
            assert mine.undecodable > 0, raw
            seen["decoder_failed"] += 1
    assert seen["decoded"] > 300
    assert seen["decoder_failed"] >= 50
