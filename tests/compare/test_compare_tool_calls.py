"""Tool-call flags on hand-made calls and on real BFCL gpt-4o function calls."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shadoweval.compare.tool_calls import tool_call_flags
from shadoweval.llm_protocol.models import ToolDefinition
from shadoweval.records import ToolCall

WEATHER = ToolDefinition.model_validate(
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "unit": {"enum": ["c", "f"]},
                },
                "required": ["city"],
                "additionalProperties": False,
            },
        },
    }
)
NO_PARAMS = ToolDefinition.model_validate({"type": "function", "function": {"name": "ping"}})


def call(name: str, arguments: str, index: int = 0) -> ToolCall:
    return ToolCall(index=index, id=f"call_{index}", name=name, arguments=arguments)


def test_valid_call() -> None:
    flags = tool_call_flags([call("get_weather", '{"city": "Paris", "unit": "c"}')], [WEATHER])
    assert flags.model_dump() == {
        "calls": 1,
        "arguments_parse": True,
        "schema_valid": True,
        "unknown_tool": False,
        "detail": None,
    }


def test_no_calls_is_vacuously_valid() -> None:
    flags = tool_call_flags([], [WEATHER])
    assert (flags.calls, flags.arguments_parse, flags.schema_valid, flags.unknown_tool) == (
        0,
        True,
        True,
        False,
    )


def test_unknown_tool() -> None:
    flags = tool_call_flags([call("get_wether", '{"city": "Paris"}')], [WEATHER])
    assert flags.arguments_parse
    assert flags.unknown_tool
    assert not flags.schema_valid
    assert flags.detail == "call 0 get_wether: tool not offered"


@pytest.mark.parametrize("tools", [None, []])
def test_every_call_is_unknown_without_tools(tools: list[ToolDefinition] | None) -> None:
    flags = tool_call_flags([call("get_weather", '{"city": "Paris"}')], tools)
    assert flags.unknown_tool
    assert not flags.schema_valid


@pytest.mark.parametrize(
    ("arguments", "reason"),
    [
        ("", "arguments do not parse as JSON (empty)"),
        ('{"city": "Paris",}', "arguments do not parse as JSON"),
        ('{"city": "Paris"} // the capital', "arguments do not parse as JSON"),
        ('["Paris"]', "arguments are a JSON array, not an object"),
        ('"Paris"', "arguments are a JSON string, not an object"),
        ("null", "arguments are a JSON null, not an object"),
    ],
)
def test_arguments_must_parse_as_an_object(arguments: str, reason: str) -> None:
    flags = tool_call_flags([call("get_weather", arguments)], [WEATHER])
    assert not flags.arguments_parse
    assert not flags.schema_valid
    assert not flags.unknown_tool
    assert flags.detail is not None
    assert flags.detail.startswith(f"call 0 get_weather: {reason}")


def test_schema_violation_names_the_path() -> None:
    flags = tool_call_flags([call("get_weather", '{"city": "Paris", "unit": "k"}')], [WEATHER])
    assert flags.arguments_parse
    assert not flags.schema_valid
    assert flags.detail is not None
    assert flags.detail.startswith("call 0 get_weather: at /unit:")


def test_flags_aggregate_over_calls_and_details_list_each_failure() -> None:
    calls = [
        call("get_weather", '{"city": "Paris"}', 0),
        call("get_weather", '{"town": "Rome"}', 1),
        call("ping", "{}", 2),
        call("nope", "{", 3),
    ]
    flags = tool_call_flags(calls, [WEATHER, NO_PARAMS])
    assert flags.calls == 4
    assert not flags.arguments_parse
    assert not flags.schema_valid
    assert flags.unknown_tool
    assert flags.detail is not None
    parts = flags.detail.split("; ")
    assert parts[0].startswith("call 1 get_weather: ")
    assert parts[1].startswith("call 3 nope: arguments do not parse")
    assert parts[2] == "call 3 nope: tool not offered"


def test_function_without_parameters_accepts_any_object() -> None:
    assert tool_call_flags([call("ping", '{"x": 1}')], [NO_PARAMS]).schema_valid


def test_invalid_parameters_schema_is_reported_not_raised() -> None:
    bad = ToolDefinition.model_validate(
        {"type": "function", "function": {"name": "f", "parameters": {"type": "dict"}}}
    )
    flags = tool_call_flags([call("f", '{"a": 1}')], [bad])
    assert flags.arguments_parse
    assert not flags.schema_valid
    assert flags.detail is not None
    assert "schema itself is invalid" in flags.detail


def test_dialect_follows_dollar_schema() -> None:
    params: dict[str, Any] = {
        "type": "object",
        "properties": {"p": {"type": "array", "items": [{"type": "integer"}, {"type": "string"}]}},
    }
    draft7 = {"$schema": "http://json-schema.org/draft-07/schema#", **params}
    tool7 = ToolDefinition.model_validate({"function": {"name": "f", "parameters": draft7}})
    assert tool_call_flags([call("f", '{"p": [1, "a"]}')], [tool7]).schema_valid
    assert not tool_call_flags([call("f", '{"p": ["a", "a"]}')], [tool7]).schema_valid
    # The array form of "items" is not valid Draft 2020-12, the default dialect.
    tool_default = ToolDefinition.model_validate({"function": {"name": "f", "parameters": params}})
    flags = tool_call_flags([call("f", '{"p": [1, "a"]}')], [tool_default])
    assert not flags.schema_valid
    assert flags.detail is not None
    assert "schema itself is invalid" in flags.detail


def test_long_detail_is_trimmed() -> None:
    calls = [call(f"tool_{i}", "{", i) for i in range(100)]
    flags = tool_call_flags(calls, [WEATHER])
    assert flags.detail is not None
    assert len(flags.detail) == 600
    assert flags.detail.endswith("…")


# ------------------------------------------------------------------------- BFCL

BFCL_MODELS = ("gpt-4o-2024-05-13-FC", "gpt-4o-2024-08-06-FC")

# Map BFCL's own type names onto JSON Schema (data README §2: "dict" means object).
_BFCL_TYPES = {"dict": "object", "float": "number", "tuple": "array"}


def _jsonl(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                yield json.loads(line)


def _tools(function: Any, *, convert: bool) -> list[ToolDefinition]:
    functions = function if isinstance(function, list) else [function]
    out = []
    for fn in functions:
        params = _to_json_schema(fn["parameters"]) if convert else fn["parameters"]
        out.append(
            ToolDefinition.model_validate(
                {"function": {"name": fn["name"].replace(".", "_"), "parameters": params}}
            )
        )
    return out


def _to_json_schema(node: Any) -> Any:
    if isinstance(node, list):
        return [_to_json_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _to_json_schema(value) for key, value in node.items() if key != "type"}
    kind = node.get("type")
    if isinstance(kind, str) and kind != "any":
        out["type"] = _BFCL_TYPES.get(kind, kind)
    return out


def _calls(result: Any) -> list[ToolCall]:
    if isinstance(result, str):  # a text answer instead of a tool call
        return []
    return [
        call(name, arguments, index)
        for index, item in enumerate(result)
        for name, arguments in item.items()
    ]


def _bfcl(shared_data: Path, model: str, category: str) -> Iterator[tuple[str, Any, Any]]:
    name = f"gorilla_openfunctions_v1_test_{category}"
    questions = _jsonl(shared_data / "bfcl/data" / f"{name}.json")
    results = _jsonl(shared_data / "bfcl/result" / model / f"{name}_result.json")
    for question, result in zip(questions, results, strict=True):
        assert question["id"] == result["id"]
        yield question["id"], question["function"], result["result"]


def test_bfcl_java_26_arguments_with_comments_fail_the_parse_flag(shared_data: Path) -> None:
    rows = {rid: (fn, res) for rid, fn, res in _bfcl(shared_data, BFCL_MODELS[0], "java")}
    function, result = rows["java_26"]
    calls = _calls(result)
    assert "// ResultSet.TYPE_SCROLL_INSENSITIVE" in calls[0].arguments
    flags = tool_call_flags(calls, _tools(function, convert=True))
    assert flags.calls == 1
    assert not flags.arguments_parse
    assert not flags.schema_valid
    assert not flags.unknown_tool
    assert flags.detail is not None
    assert flags.detail.startswith(
        "call 0 ProxyConnection_prepareCall: arguments do not parse as JSON"
    )


def test_bfcl_all_unparseable_arguments_are_the_four_known_ones(shared_data: Path) -> None:
    """Data README §2: 4 of 4,844 argument strings do not parse; no call ever raises."""
    categories = sorted(
        p.name.removeprefix("gorilla_openfunctions_v1_test_").removesuffix(".json")
        for p in (shared_data / "bfcl/data").glob("gorilla_openfunctions_v1_test_*.json")
    )
    assert len(categories) == 12
    failing: set[tuple[str, str]] = set()
    total_calls = 0
    for model in BFCL_MODELS:
        for category in categories:
            for rid, function, result in _bfcl(shared_data, model, category):
                calls = _calls(result)
                total_calls += len(calls)
                flags = tool_call_flags(calls, _tools(function, convert=False))
                if not flags.arguments_parse:
                    failing.add((model, rid))
    assert total_calls == 4844
    assert failing == {
        ("gpt-4o-2024-05-13-FC", "java_26"),
        ("gpt-4o-2024-05-13-FC", "java_34"),
        ("gpt-4o-2024-05-13-FC", "simple_99"),
        ("gpt-4o-2024-08-06-FC", "relevance_68"),
    }


def test_bfcl_raw_schemas_are_reported_invalid(shared_data: Path) -> None:
    """BFCL's "type": "dict" is not JSON Schema: schema_valid is false, with the reason."""
    rows = {rid: (fn, res) for rid, fn, res in _bfcl(shared_data, BFCL_MODELS[1], "simple")}
    function, result = rows["simple_0"]
    flags = tool_call_flags(_calls(result), _tools(function, convert=False))
    assert flags.arguments_parse
    assert not flags.schema_valid
    assert flags.detail is not None
    assert "schema itself is invalid" in flags.detail


def test_bfcl_simple_with_converted_schemas(shared_data: Path) -> None:
    rows = {rid: (fn, res) for rid, fn, res in _bfcl(shared_data, BFCL_MODELS[1], "simple")}
    function, result = rows["simple_0"]
    assert result == [{"calculate_triangle_area": '{"base":10,"height":5}'}]
    flags = tool_call_flags(_calls(result), _tools(function, convert=True))
    assert (flags.arguments_parse, flags.schema_valid, flags.unknown_tool) == (True, True, False)

    # Real misses: a required argument left out, a null inside an integer array.
    schema_misses: dict[str, set[str]] = {model: set() for model in BFCL_MODELS}
    valid = dict.fromkeys(BFCL_MODELS, 0)
    for model in BFCL_MODELS:
        for rid, function, result in _bfcl(shared_data, model, "simple"):
            calls = _calls(result)
            flags = tool_call_flags(calls, _tools(function, convert=True))
            valid[model] += bool(calls) and flags.schema_valid
            if calls and flags.arguments_parse and not flags.schema_valid:
                schema_misses[model].add(rid)
    assert valid == {"gpt-4o-2024-05-13-FC": 394, "gpt-4o-2024-08-06-FC": 389}
    assert schema_misses == {
        "gpt-4o-2024-05-13-FC": {"simple_124", "simple_337", "simple_352", "simple_373"},
        "gpt-4o-2024-08-06-FC": {"simple_337", "simple_373"},
    }
