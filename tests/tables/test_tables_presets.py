"""Presets on the real files in ../shared/data (AlpacaEval, MT-Bench, BFCL)."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import orjson
import pytest
from jsonschema import Draft202012Validator

from shadoweval.errors import TableMappingError
from shadoweval.tables import PRESETS, load_recorded_rows, preset

ALPACA_MODELS = (
    "Meta-Llama-3-8B-Instruct",
    "Meta-Llama-3.1-8B-Instruct-Turbo",
    "Qwen1.5-72B-Chat",
    "Qwen2-72B-Instruct",
)
ALPACA_TASKS = {"helpful_base": 129, "koala": 156, "oasst": 188, "selfinstruct": 252, "vicuna": 80}
BFCL_MODELS = ("gpt-4o-2024-05-13-FC", "gpt-4o-2024-08-06-FC")
BFCL_CATEGORIES = {
    "simple": 400,
    "multiple_function": 200,
    "parallel_function": 200,
    "parallel_multiple_function": 200,
    "relevance": 240,
    "java": 100,
    "javascript": 50,
    "rest": 70,
    "executable_simple": 100,
    "executable_multiple_function": 50,
    "executable_parallel_function": 50,
    "executable_parallel_multiple_function": 40,
}
BFCL_TEXT_REPLIES = {"gpt-4o-2024-05-13-FC": 206, "gpt-4o-2024-08-06-FC": 280}


def test_registry_names_the_table_and_trace_presets() -> None:
    assert set(PRESETS) == {"alpaca_eval", "mt_bench", "bfcl", "otel_genai", "langfuse", "litellm"}
    assert {name for name, p in PRESETS.items() if p.kind == "trace"} == {
        "otel_genai",
        "langfuse",
        "litellm",
    }
    assert preset("bfcl").uses_prompts
    assert not preset("alpaca_eval").uses_prompts


def test_unknown_preset_lists_known_ones() -> None:
    with pytest.raises(TableMappingError, match=r"unknown preset 'alpaca'.*alpaca_eval, bfcl"):
        preset("alpaca")


@pytest.mark.parametrize("model", ALPACA_MODELS)
def test_alpaca_eval_preset(shared_data: Path, model: str) -> None:
    path = shared_data / "alpaca_eval" / model / "model_outputs.json"
    result = load_recorded_rows(path, preset="alpaca_eval")
    assert result.rejected == []
    assert len(result.rows) == 805
    assert Counter(r.task_type for r in result.rows) == ALPACA_TASKS
    assert {r.model for r in result.rows} == {model}
    raw = orjson.loads(path.read_bytes())
    for i in (0, 199, 262, 537, 804):
        row = result.rows[i]
        assert row.messages == [{"role": "user", "content": raw[i]["instruction"]}]
        assert row.output_text == raw[i]["output"]
        assert row.tool_calls == ()
        assert row.tools is None
        assert row.location == f"{path}#{i}"
        assert row.latency_ms is None
        assert row.prompt_tokens is None
    assert len({r.key for r in result.rows}) == 805


def test_alpaca_pair_rows_share_keys(shared_data: Path) -> None:
    base = load_recorded_rows(
        shared_data / "alpaca_eval/Meta-Llama-3-8B-Instruct/model_outputs.json",
        preset="alpaca_eval",
    )
    cand = load_recorded_rows(
        shared_data / "alpaca_eval/Meta-Llama-3.1-8B-Instruct-Turbo/model_outputs.json",
        preset="alpaca_eval",
    )
    assert [r.key for r in base.rows] == [r.key for r in cand.rows]
    assert [r.prompt_key for r in base.rows] == [r.prompt_key for r in cand.rows]


@pytest.mark.parametrize("model", ["gpt-3.5-turbo", "gpt-4", "vicuna-7b-v1.3", "vicuna-13b-v1.3"])
def test_mt_bench_preset_first_turns(shared_data: Path, model: str) -> None:
    answers = shared_data / "mt_bench" / "model_answer" / f"{model}.jsonl"
    questions = shared_data / "mt_bench" / "question.jsonl"
    result = load_recorded_rows(answers, preset="mt_bench", prompts=questions)
    assert result.rejected == []
    assert len(result.rows) == 80
    assert Counter(r.task_type for r in result.rows) == {
        c: 10
        for c in (
            "writing",
            "roleplay",
            "reasoning",
            "math",
            "coding",
            "extraction",
            "stem",
            "humanities",
        )
    }
    q_lines = [orjson.loads(x) for x in questions.read_text().splitlines()]
    a_lines = [orjson.loads(x) for x in answers.read_text().splitlines()]
    first = result.rows[0]
    assert first.key == str(q_lines[0]["question_id"])
    assert first.messages == [{"role": "user", "content": q_lines[0]["turns"][0]}]
    assert first.output_text == a_lines[0]["choices"][0]["turns"][0]
    assert {r.model for r in result.rows} == {a_lines[0]["model_id"]}


def test_mt_bench_finds_question_file_by_default(shared_data: Path) -> None:
    result = load_recorded_rows(
        shared_data / "mt_bench/model_answer/gpt-4.jsonl", preset="mt_bench"
    )
    assert len(result.rows) == 80


def test_mt_bench_answer_without_question_is_rejected(shared_data: Path, tmp_path: Path) -> None:
    lines = (shared_data / "mt_bench/model_answer/gpt-4.jsonl").read_text().splitlines()
    record = orjson.loads(lines[3])
    record["question_id"] = 999
    lines[3] = orjson.dumps(record).decode()
    answers = tmp_path / "answers.jsonl"
    answers.write_text("\n".join(lines) + "\n")
    result = load_recorded_rows(
        answers, preset="mt_bench", prompts=shared_data / "mt_bench/question.jsonl"
    )
    assert len(result.rows) == 79
    [rejected] = result.rejected
    assert rejected.location == f"{answers}#3"
    assert rejected.reason == "unmatched_id"
    assert rejected.raw["question_id"] == 999


@pytest.mark.parametrize("model", BFCL_MODELS)
def test_bfcl_preset_directories(shared_data: Path, model: str) -> None:
    result = load_recorded_rows(
        shared_data / "bfcl" / "result" / model,
        preset="bfcl",
        prompts=shared_data / "bfcl" / "data",
    )
    assert result.rejected == []
    assert len(result.rows) == 1700
    assert Counter(r.task_type for r in result.rows) == BFCL_CATEGORIES
    assert {r.model for r in result.rows} == {model}
    assert sum(1 for r in result.rows if r.output_text is not None) == BFCL_TEXT_REPLIES[model]
    for row in result.rows:
        assert row.tools, row.key
        for tool in row.tools:
            assert tool["type"] == "function"
            assert "." not in tool["function"]["name"]
            Draft202012Validator.check_schema(tool["function"]["parameters"])
        assert row.latency_ms is not None
        assert row.latency_ms > 0
        assert row.prompt_tokens is not None
        assert row.completion_tokens is not None
        assert (row.output_text is None) == bool(row.tool_calls)


def test_bfcl_called_names_are_offered_tools(shared_data: Path) -> None:
    """README: every called name is among the offered (renamed) functions, 05-13."""
    result = load_recorded_rows(shared_data / "bfcl/result/gpt-4o-2024-05-13-FC", preset="bfcl")
    for row in result.rows:
        offered = {t["function"]["name"] for t in row.tools or []}
        for call in row.tool_calls:
            assert call.name in offered, (row.key, call.name)


def test_bfcl_values_match_the_files(shared_data: Path) -> None:
    result = load_recorded_rows(
        shared_data
        / "bfcl/result/gpt-4o-2024-05-13-FC/gorilla_openfunctions_v1_test_simple_result.json",
        preset="bfcl",
        prompts=shared_data / "bfcl/data/gorilla_openfunctions_v1_test_simple.json",
    )
    assert len(result.rows) == 400
    row = result.rows[0]
    assert row.key == "simple_0"
    assert row.task_type == "simple"
    assert row.model == "gpt-4o-2024-05-13-FC"
    assert row.messages == [
        {
            "role": "user",
            "content": "Find the area of a triangle with a base of 10 units and height of 5 units.",
        }
    ]
    assert row.latency_ms == pytest.approx(613.8060092926025)
    assert (row.prompt_tokens, row.completion_tokens) == (117, 19)
    [call] = row.tool_calls
    assert (call.name, call.arguments) == ("calculate_triangle_area", '{"base":10,"height":5}')
    assert row.tools == [
        {
            "type": "function",
            "function": {
                "name": "calculate_triangle_area",
                "description": "Calculate the area of a triangle given its base and height.",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "base": {"type": "integer", "description": "The base of the triangle."},
                        "height": {"type": "integer", "description": "The height of the triangle."},
                        "unit": {
                            "type": "string",
                            "description": (
                                "The unit of measure (defaults to 'units' if not specified)"
                            ),
                        },
                    },
                    "required": ["base", "height"],
                },
            },
        }
    ]


def test_bfcl_unparseable_arguments_are_kept_verbatim(shared_data: Path) -> None:
    """README: java_26, java_34 and simple_99 (05-13) hold // comments; kept as data."""
    result = load_recorded_rows(shared_data / "bfcl/result/gpt-4o-2024-05-13-FC", preset="bfcl")
    by_key = {r.key: r for r in result.rows}
    for key in ("java_26", "java_34", "simple_99"):
        assert any("//" in c.arguments for c in by_key[key].tool_calls), key


def test_bfcl_java_parameters_are_strings(shared_data: Path) -> None:
    result = load_recorded_rows(
        shared_data
        / "bfcl/result/gpt-4o-2024-08-06-FC/gorilla_openfunctions_v1_test_java_result.json",
        preset="bfcl",
    )
    row = next(r for r in result.rows if r.key == "java_1")
    assert row.tools is not None
    props = row.tools[0]["function"]["parameters"]["properties"]
    assert row.tools[0]["function"]["name"] == "SQLCompletionAnalyzer_makeProposalsFromObject"
    assert {p["type"] for p in props.values()} == {"string"}
    assert "Java HashMap type parameter in string representation" in props["params"]["description"]
    assert "Java boolean type" in props["useShortName"]["description"]


def test_bfcl_missing_question_file_is_a_mapping_error(shared_data: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    shutil.copy(shared_data / "bfcl/data/gorilla_openfunctions_v1_test_simple.json", data)
    with pytest.raises(
        TableMappingError, match=r"no BFCL question file .*_test_executable_multiple_function\.json"
    ):
        load_recorded_rows(
            shared_data / "bfcl/result/gpt-4o-2024-05-13-FC", preset="bfcl", prompts=data
        )


def test_bfcl_result_without_question_is_rejected(shared_data: Path, tmp_path: Path) -> None:
    model_dir = tmp_path / "result" / "my-model"
    model_dir.mkdir(parents=True)
    name = "gorilla_openfunctions_v1_test_rest"
    lines = (shared_data / f"bfcl/result/gpt-4o-2024-05-13-FC/{name}_result.json").read_text()
    records = [orjson.loads(x) for x in lines.splitlines()]
    records[5]["id"] = "rest_9999"
    (model_dir / f"{name}_result.json").write_bytes(
        b"\n".join(orjson.dumps(r) for r in records) + b"\n"
    )
    result = load_recorded_rows(model_dir, preset="bfcl", prompts=shared_data / "bfcl/data")
    assert len(result.rows) == 69
    assert {r.model for r in result.rows} == {"my-model"}
    [rejected] = result.rejected
    assert (rejected.reason, rejected.location) == (
        "unmatched_id",
        f"{model_dir / (name + '_result.json')}#5",
    )


def test_preset_and_mapping_are_exclusive(shared_data: Path) -> None:
    with pytest.raises(TableMappingError, match="exactly one"):
        load_recorded_rows(shared_data / "mt_bench/question.jsonl")
    with pytest.raises(TableMappingError, match="does not take a prompts table"):
        load_recorded_rows(
            shared_data / "alpaca_eval/Qwen2-72B-Instruct/model_outputs.json",
            preset="alpaca_eval",
            prompts=shared_data / "mt_bench/question.jsonl",
        )
