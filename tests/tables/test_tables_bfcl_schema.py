"""BFCL function definitions → OpenAI tools with valid JSON Schema."""

from __future__ import annotations

from typing import Any

import pytest
from jsonschema import Draft202012Validator

from shadoweval.tables import bfcl_function_to_tool, bfcl_functions_to_openai_tools


def _params(function: dict[str, Any], language: Any = "python") -> dict[str, Any]:
    tool = bfcl_function_to_tool(function, language=language)
    Draft202012Validator.check_schema(tool["function"]["parameters"])
    params: dict[str, Any] = tool["function"]["parameters"]
    return params


def test_types_are_mapped_recursively() -> None:
    params = _params(
        {
            "name": "geo.distance",
            "parameters": {
                "type": "dict",
                "properties": {
                    "a": {"type": "tuple", "items": {"type": "float"}},
                    "data": {"type": "any", "description": "Anything."},
                    "opts": {
                        "type": "dict",
                        "properties": {
                            "deep": {"type": "array", "items": {"type": "dict", "properties": {}}}
                        },
                        "required": ["deep"],
                    },
                    "flag": {"type": "boolean", "optional": True, "required": True},
                    "blank": {"type": ""},
                    "odd": {"type": "Widget"},
                    "pair": {"type": "array", "items": [{"type": "float"}, {"type": "integer"}]},
                },
                "required": ["a", "a", "data"],
            },
        }
    )
    props = params["properties"]
    assert params["type"] == "object"
    assert props["a"] == {"type": "array", "items": {"type": "number"}}
    assert props["data"] == {"description": "Anything."}
    assert props["opts"]["type"] == "object"
    assert props["opts"]["properties"]["deep"]["items"]["type"] == "object"
    assert props["flag"] == {"type": "boolean", "optional": True}
    assert props["blank"] == {}
    assert props["odd"] == {"type": "string"}
    assert props["pair"] == {
        "type": "array",
        "prefixItems": [{"type": "number"}, {"type": "integer"}],
    }
    assert params["required"] == ["a", "data"]


def test_name_dots_become_underscores_and_description_is_kept() -> None:
    tool = bfcl_function_to_tool(
        {"name": "requests.get", "description": "GET.", "parameters": {"type": "dict"}}
    )
    assert tool == {
        "type": "function",
        "function": {
            "name": "requests_get",
            "description": "GET.",
            "parameters": {"type": "object", "properties": {}},
        },
    }


@pytest.mark.parametrize(("language", "word"), [("java", "Java"), ("javascript", "JavaScript")])
def test_java_and_javascript_parameters_become_strings(language: str, word: str) -> None:
    params = _params(
        {
            "name": "Util.run",
            "parameters": {
                "type": "dict",
                "properties": {
                    "ch": {"type": "Array", "description": "Chars.", "items": {"type": "char"}},
                    "n": {"type": "integer", "description": "Count."},
                    "obj": {"type": "any", "description": "Target."},
                    "opts": {
                        "type": "dict",
                        "description": "Options.",
                        "properties": {"issuer": {"type": "", "description": "x"}},
                    },
                },
                "required": ["ch"],
            },
        },
        language,
    )
    props = params["properties"]
    assert {p["type"] for p in props.values()} == {"string"}
    assert props["n"]["description"] == (
        f"Count. This is {word} integer type parameter in string representation."
    )
    assert props["ch"]["description"].endswith(
        "The list elements are of type char; they are not in string representation."
    )
    assert "any type of" in props["obj"]["description"]
    assert "properties" not in props["opts"]
    assert "items" not in props["ch"]
    assert params["required"] == ["ch"]


def test_accepts_one_object_a_list_or_json_text() -> None:
    one = {"name": "f", "parameters": {"type": "dict", "properties": {}}}
    assert bfcl_functions_to_openai_tools(one) == bfcl_functions_to_openai_tools([one])
    assert (
        bfcl_functions_to_openai_tools('[{"name": "f", "parameters": {}}]')[0]["function"]["name"]
        == "f"
    )
    with pytest.raises(ValueError, match="no name"):
        bfcl_functions_to_openai_tools([{"parameters": {}}])
