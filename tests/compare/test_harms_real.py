"""The harm detectors and tool changes on the real files in ../shared/data (read, never copied).

The per-file counts pinned here are the flag rates reported for the detectors
(``shadoweval.compare.harms`` module docstring, docs/real-data.md): a change to a threshold or a
pattern shows up here first.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from shadoweval.compare.encoders import HashingEncoder
from shadoweval.compare.harms import (
    compile_refusal_patterns,
    is_degenerate,
    is_language_switch,
    is_refusal,
    tool_changes,
    window_compression_ratio,
)
from shadoweval.compare.pair import PairInput, score_pairs
from shadoweval.records import (
    Exchange,
    FinishReason,
    HarmKind,
    ModelIdentity,
    ReplayOutcome,
    RequestRecord,
    ResponseRecord,
    ToolCall,
    ToolChange,
)

DEFAULTS = compile_refusal_patterns()
LLAMA3, LLAMA31 = "Meta-Llama-3-8B-Instruct", "Meta-Llama-3.1-8B-Instruct-Turbo"
QWEN15, QWEN2 = "Qwen1.5-72B-Chat", "Qwen2-72B-Instruct"
MT_MODELS = ("gpt-3.5-turbo", "gpt-4", "vicuna-7b-v1.3", "vicuna-13b-v1.3")
BFCL_BASE, BFCL_CAND = "gpt-4o-2024-05-13-FC", "gpt-4o-2024-08-06-FC"

Rows = dict[str, list[dict[str, Any]]]


def _jsonl(path: Path) -> list[dict[str, Any]]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def _fires(detector: str, text: str, prompt: str) -> bool:
    if detector == "degeneration":
        return is_degenerate(text)
    if detector == "refusal":
        return is_refusal(text, DEFAULTS)
    assert detector == "language_switch"
    return is_language_switch(text, prompt)


def _flagged(rows: list[dict[str, Any]], detector: str) -> set[int]:
    return {
        index
        for index, row in enumerate(rows)
        if _fires(detector, row["output"], row["instruction"])
    }


# ------------------------------------------------------------------ AlpacaEval


def test_alpaca_hashtag_and_long_loops_are_degenerate(alpaca: Rows) -> None:
    """Llama-3.1-8B-Instruct-Turbo degenerates: '#' loops, and every 10k+ character answer."""
    rows = alpaca[LLAMA31]
    hashtag = {i for i, row in enumerate(rows) if row["output"].count("#") >= 1000}
    assert hashtag == {127, 264, 410}  # '=#=#=#…', '#. #. #.…', a '#'-and-'|' loop
    assert rows[410]["output"].endswith("#. #. #. #.")
    longest = {i for i, row in enumerate(rows) if len(row["output"]) >= 10_000}
    assert longest == {30, 51, 73, 180, 209, 496, 524, 758}  # 10–15k characters each
    flagged = _flagged(rows, "degeneration")
    assert hashtag | longest <= flagged
    # 37 long loops (deflate windows) and 10 short ones — 'Dear [Recipient]' ×4, 'celda' ×11,
    # 'No No No …' — that no window caught (issue 29 item 10): each one read by eye, a loop.
    short = {81, 130, 189, 196, 201, 372, 510, 576, 614, 799}
    assert len(flagged) == 47
    assert short <= flagged
    assert not any(window_compression_ratio(rows[i]["output"]) >= 6 for i in short)


def test_alpaca_flag_rates_on_normal_answers(alpaca: Rows) -> None:
    """Normal answers — lists, code, essays, tables — are (nearly) never degenerate."""
    assert _flagged(alpaca[LLAMA3], "degeneration") == set()
    assert _flagged(alpaca[QWEN2], "degeneration") == set()
    # Qwen1.5 row 535 is a real loop: '暴风雪礼赞' repeated for 3,000 characters.
    assert _flagged(alpaca[QWEN15], "degeneration") == {535}
    assert "暴风雪礼赞暴风雪礼赞暴风雪礼赞" in alpaca[QWEN15][535]["output"]


@pytest.mark.parametrize("model", [LLAMA3, LLAMA31, QWEN15, QWEN2])
def test_write_test_row_is_no_harm(alpaca: Rows, model: str) -> None:
    """Data README: row 199 is ``Write "Test"``, answered with a tiny text."""
    row = alpaca[model][199]
    assert row["instruction"] == 'Write "Test"'
    assert not is_degenerate(row["output"])
    assert not is_refusal(row["output"], DEFAULTS)
    assert not is_language_switch(row["output"], row["instruction"])


def test_alpaca_refusals(alpaca: Rows) -> None:
    counts = {model: len(_flagged(alpaca[model], "refusal")) for model in alpaca}
    assert counts == {LLAMA3: 4, LLAMA31: 8, QWEN15: 20, QWEN2: 10}
    assert alpaca[LLAMA31][392]["output"] == "I can't help with that request."
    assert 392 in _flagged(alpaca[LLAMA31], "refusal")
    # Qwen1.5's "As an AI language model, …" deflections make most of its 20.
    qwen = _flagged(alpaca[QWEN15], "refusal")
    deflections = [i for i in qwen if alpaca[QWEN15][i]["output"].startswith("As an AI")]
    assert len(deflections) >= 12


QWEN15_CJK_FRAGMENTS = {
    1, 49, 79, 89, 96, 112, 113, 134, 145, 187, 240, 248, 279, 329, 332, 334, 380, 390, 392,
    399, 435, 444, 454, 478, 497, 535, 536, 541, 548, 556, 560, 583, 595, 604, 643, 650, 722,
    749, 755, 762, 777, 801,
}  # fmt: skip


def test_alpaca_language_switches(alpaca: Rows) -> None:
    """Qwen1.5 splices Chinese into 42 English answers (two wholly Chinese); Qwen2 into 3.

    Every flagged answer read by eye (docs/gate.md "Detectors measured"): each a real
    switch. Left out by rule and right to be: rows 94 (``Tong Sui (糖水)``, a gloss), 286
    (``"仲裁" (arbitrator) in Chinese``) and 374 (the prompt is about Mandarin). One miss:
    Qwen1.5 row 312, ``RTL-SDR (便宜且广泛可用)`` (Chinese for "cheap and widely available")
    has the shape of a gloss.
    """
    assert _flagged(alpaca[QWEN15], "language_switch") == QWEN15_CJK_FRAGMENTS
    assert alpaca[QWEN15][755]["output"].startswith("There are several ways")
    assert "观察顾客" in alpaca[QWEN15][755]["output"]
    assert _flagged(alpaca[QWEN2], "language_switch") == {13, 25, 544}
    for model in (LLAMA3, LLAMA31):
        assert _flagged(alpaca[model], "language_switch") == set()


# ------------------------------------------------------------------ MT-Bench


def _mt_bench(shared_data: Path, model: str) -> Iterator[tuple[int, int, str, str]]:
    folder = shared_data / "mt_bench"
    questions = _jsonl(folder / "question.jsonl")
    answers = _jsonl(folder / "model_answer" / f"{model}.jsonl")
    for question, answer in zip(questions, answers, strict=True):
        assert question["question_id"] == answer["question_id"]
        for turn, (prompt, text) in enumerate(
            zip(question["turns"], answer["choices"][0]["turns"], strict=True)
        ):
            yield question["question_id"], turn, prompt, text


def test_mt_bench_flag_rates(shared_data: Path) -> None:
    degenerate: set[tuple[str, int, int]] = set()
    refusals: Counter[str] = Counter()
    switches = 0
    for model in MT_MODELS:
        for qid, turn, prompt, text in _mt_bench(shared_data, model):
            if is_degenerate(text):
                degenerate.add((model, qid, turn))
            refusals[model] += is_refusal(text, DEFAULTS)
            switches += is_language_switch(text, prompt)
    # One of 640: Vicuna-13B's answer to coding question 125 loops in nested if/elif.
    assert degenerate == {("vicuna-13b-v1.3", 125, 0)}
    assert refusals == {"gpt-3.5-turbo": 4, "gpt-4": 3, "vicuna-7b-v1.3": 6, "vicuna-13b-v1.3": 8}
    assert switches == 0


# ------------------------------------------------------------------ BFCL


def _calls(result: Any) -> tuple[ToolCall, ...]:
    if isinstance(result, str):
        return ()
    return tuple(
        ToolCall(index=i, id=f"c{i}", name=name, arguments=arguments)
        for i, item in enumerate(result)
        for name, arguments in item.items()
    )


def _response(result: Any) -> ResponseRecord:
    text = result if isinstance(result, str) else ""
    calls = _calls(result)
    return ResponseRecord(
        status_code=200,
        text=text,
        tool_calls=calls,
        finish_reason_raw="tool_calls" if calls else "stop",
        finish_reason=FinishReason.TOOL_CALLS if calls else FinishReason.STOP,
    )


def _bfcl_pairs(shared_data: Path, category: str) -> list[PairInput]:
    """BFCL 05-13 as the captured baseline, 08-06 as the candidate replay, per item."""
    name = f"gorilla_openfunctions_v1_test_{category}"
    questions = _jsonl(shared_data / "bfcl/data" / f"{name}.json")
    base = _jsonl(shared_data / "bfcl/result" / BFCL_BASE / f"{name}_result.json")
    cand = _jsonl(shared_data / "bfcl/result" / BFCL_CAND / f"{name}_result.json")
    items = []
    for question, b, c in zip(questions, base, cand, strict=True):
        assert question["id"] == b["id"] == c["id"]
        functions = question["function"]
        functions = functions if isinstance(functions, list) else [functions]
        tools = [
            {
                "type": "function",
                "function": {"name": fn["name"].replace(".", "_"), "parameters": fn["parameters"]},
            }
            for fn in functions
        ]
        body = {
            "model": BFCL_BASE,
            "messages": [{"role": "user", "content": str(question["question"])}],
            "tools": tools,
            "temperature": 0.7,  # the harness default at the data's gorilla commit
        }
        exchange = Exchange(
            exchange_id=question["id"],
            captured_at=datetime(2024, 8, 11, tzinfo=UTC),
            task_type=category,
            request=RequestRecord(body=json.dumps(body)),
            response=_response(b["result"]),
            baseline_model=ModelIdentity(name=BFCL_BASE),
        )
        replay = ReplayOutcome(
            run_id="bfcl",
            exchange_id=question["id"],
            model=ModelIdentity(name=BFCL_CAND),
            response=_response(c["result"]),
        )
        items.append(PairInput(exchange=exchange, candidate=replay))
    return items


BFCL_CATEGORIES = (
    "simple",
    "multiple_function",
    "parallel_function",
    "parallel_multiple_function",
    "relevance",
    "java",
    "javascript",
    "rest",
    "executable_simple",
    "executable_multiple_function",
    "executable_parallel_function",
    "executable_parallel_multiple_function",
)

# Measured 05-13 → 08-06, one change per pair at most.
BFCL_TOOL_CHANGES: dict[str, dict[str, int]] = {
    "simple": {"text_instead_of_call": 9, "call_instead_of_text": 1, "function_changed": 10,
               "arguments_changed": 43},
    "multiple_function": {"text_instead_of_call": 3, "function_changed": 3,
                          "arguments_changed": 19},
    "parallel_function": {"function_changed": 3, "arguments_changed": 23, "order_changed": 3},
    "parallel_multiple_function": {"function_changed": 9, "arguments_changed": 26,
                                   "order_changed": 1},
    "relevance": {"text_instead_of_call": 26, "call_instead_of_text": 1,
                  "arguments_changed": 7},
    "java": {"text_instead_of_call": 10, "function_changed": 3, "arguments_changed": 17},
    "javascript": {"text_instead_of_call": 8, "function_changed": 2, "arguments_changed": 10},
    "rest": {"text_instead_of_call": 19, "function_changed": 1, "arguments_changed": 3},
    "executable_simple": {"arguments_changed": 3},
    "executable_multiple_function": {"text_instead_of_call": 1, "function_changed": 3,
                                     "arguments_changed": 1},
    "executable_parallel_function": {"function_changed": 1, "arguments_changed": 3},
    "executable_parallel_multiple_function": {"arguments_changed": 2},
}  # fmt: skip


def test_bfcl_rest_text_instead_of_call(shared_data: Path) -> None:
    """Data README: 08-06 answers ``rest`` in text 28 of 70 times; 05-13 does 9 times."""
    scores = score_pairs(_bfcl_pairs(shared_data, "rest"), HashingEncoder(), run_id="bfcl")
    base_text = sum(
        1 for s in scores if s.baseline_tools is not None and s.baseline_tools.calls == 0
    )
    cand_text = sum(
        1 for s in scores if s.candidate_tools is not None and s.candidate_tools.calls == 0
    )
    assert (base_text, cand_text) == (9, 28)
    changes = Counter(change for s in scores for change in s.tool_changes)
    assert changes[ToolChange.TEXT_INSTEAD_OF_CALL] >= cand_text - base_text  # the asymmetry
    assert changes[ToolChange.TEXT_INSTEAD_OF_CALL] == 19
    assert changes[ToolChange.CALL_INSTEAD_OF_TEXT] == 0
    assert all(s.sampled is True for s in scores)


def test_bfcl_tool_changes_per_category(shared_data: Path) -> None:
    measured: dict[str, dict[str, int]] = {}
    text_answers = Counter[str]()
    for category in BFCL_CATEGORIES:
        items = _bfcl_pairs(shared_data, category)
        counts = Counter(
            change.value
            for item in items
            for change in tool_changes(
                item.exchange.response.tool_calls if item.exchange.response else (),
                item.candidate.response.tool_calls if item.candidate.response else (),
            )
        )
        measured[category] = dict(counts)
        for item in items:
            text_answers["base"] += (
                not item.exchange.response or not item.exchange.response.tool_calls
            )
            text_answers["cand"] += (
                not item.candidate.response or not item.candidate.response.tool_calls
            )
    assert measured == BFCL_TOOL_CHANGES
    assert text_answers == {"base": 206, "cand": 280}  # data README: 206 vs 280 of 1,700


def test_bfcl_the_same_two_calls_in_reverse_order(shared_data: Path) -> None:
    """parallel_multiple_function_84: math_lcm then math_gcd, and 08-06 the other way round."""
    items = {
        item.exchange.exchange_id: item
        for item in _bfcl_pairs(shared_data, "parallel_multiple_function")
    }
    item = items["parallel_multiple_function_84"]
    assert item.exchange.response is not None
    assert item.candidate.response is not None
    base = item.exchange.response.tool_calls
    cand = item.candidate.response.tool_calls
    assert [c.name for c in base] == ["math_lcm", "math_gcd"]
    assert [c.name for c in cand] == ["math_gcd", "math_lcm"]
    assert tool_changes(base, cand) == (ToolChange.ORDER_CHANGED,)
    assert tool_changes(base, cand, order_free=True) == ()
    [score] = score_pairs([item], HashingEncoder(), run_id="bfcl")
    assert score.tool_changes == (ToolChange.ORDER_CHANGED,)
    assert score.baseline_harms == score.candidate_harms == ()

    # The same real calls reversed by hand: an order change, never a function/argument one.
    reversed_calls = tuple(
        call.model_copy(update={"index": len(base) - 1 - call.index}) for call in base
    )
    assert tool_changes(base, reversed_calls) == (ToolChange.ORDER_CHANGED,)


def test_bfcl_relevance_refusals_are_flagged_on_the_side_that_gives_them(
    shared_data: Path,
) -> None:
    """In ``relevance`` a text answer is right; refusal is still flagged per side as data."""
    scores = score_pairs(_bfcl_pairs(shared_data, "relevance"), HashingEncoder(), run_id="bfcl")
    base = sum(HarmKind.REFUSAL in s.baseline_harms for s in scores)
    cand = sum(HarmKind.REFUSAL in s.candidate_harms for s in scores)
    assert (base, cand) == (1, 8)
    assert not any(HarmKind.DEGENERATION in s.candidate_harms for s in scores)
