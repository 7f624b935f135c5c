"""BFCL function definitions → OpenAI tools with valid JSON Schema (draft 2020-12).

The Berkeley Function Calling Leaderboard (gorilla ``openfunctions_v1`` test files) writes
parameter schemas in its own dialect. Its FC ("function calling") mode converted them
before calling OpenAI models (gorilla ``model_handler/utils.py``: ``convert_to_tool``,
``_cast_to_openai_type``, ``language_specific_pre_processing``). This module does the same
conversion, with the rules below, and the result always passes
``jsonschema.Draft202012Validator.check_schema``:

1. **Function names**: ``.`` → ``_`` (``math.factorial`` → ``math_factorial``), because
   OpenAI tool names cannot contain dots; the recorded results use the renamed names.
2. **Types** (everywhere in the schema, recursively):

   * ``dict`` → ``object``; ``float``/``double`` → ``number``; ``tuple`` → ``array``
     (JSON has no tuples); ``int``/``long``/``short``/``byte``/``Bigint`` → ``integer``;
     ``bool``/``Boolean`` → ``boolean``; ``list``/``Array``/``ArrayList``/``Queue``/
     ``Stack`` → ``array``; ``HashMap``/``Hashtable`` → ``object``; ``String``/``char``/
     ``str`` → ``string``; JSON Schema's own names are kept.
   * ``any``/``Any`` and the empty string → **no type constraint** (the ``type`` keyword is
     removed; BFCL sent ``string`` here, which forbids what "any" allows).
   * Any other unknown type name → ``string`` (BFCL's fallback).
3. **Java and JavaScript categories** (``language="java"``/``"javascript"``): every
   top-level parameter is typed ``string``, whatever its declared type, because FC mode
   asked for Java/JS values "in string representation" (the recorded arguments are
   strings such as ``"true"`` and ``"{\\"limit\\": 50}"``). The declared type is kept in
   the description, in BFCL's words ("This is Java HashMap type parameter in string
   representation."); nested ``properties``/``items`` of such a parameter are dropped
   (the element type of an array is named in the description instead).
4. **Keyword repair for validity**: a ``required`` that is not a list of strings (draft-3
   style ``required: true`` on a property) is dropped, and duplicates are removed; an
   ``items`` given as a list (tuple validation) becomes ``prefixItems``; a ``description``
   that is not a string is turned into one. Unknown keywords (BFCL's ``optional``, one
   file's typo ``requried``) are kept: JSON Schema ignores unknown keywords.
5. The top-level ``parameters`` is always ``{"type": "object", "properties": {...}}``.

BFCL's FC mode also appended " This is a float type value." to float descriptions and
added ``format: float``; this module does not, so descriptions are the dataset's own.
"""

from __future__ import annotations

from typing import Any, Literal

import orjson

BfclLanguage = Literal["python", "java", "javascript"]

BFCL_TYPE_MAP: dict[str, str] = {
    "object": "object",
    "dict": "object",
    "HashMap": "object",
    "Hashtable": "object",
    "number": "number",
    "float": "number",
    "double": "number",
    "integer": "integer",
    "int": "integer",
    "long": "integer",
    "short": "integer",
    "byte": "integer",
    "Bigint": "integer",
    "string": "string",
    "String": "string",
    "str": "string",
    "char": "string",
    "boolean": "boolean",
    "bool": "boolean",
    "Boolean": "boolean",
    "array": "array",
    "list": "array",
    "tuple": "array",
    "Array": "array",
    "ArrayList": "array",
    "Queue": "array",
    "Stack": "array",
    "null": "null",
}
"""BFCL (and Java/JS) type names → JSON Schema type names."""

NO_TYPE_CONSTRAINT: frozenset[str] = frozenset({"any", "Any", ""})
"""BFCL type names that mean "any value": the ``type`` keyword is removed."""

_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SCHEMA_VALUES = (
    "additionalProperties",
    "unevaluatedProperties",
    "additionalItems",
    "unevaluatedItems",
    "contains",
    "not",
    "if",
    "then",
    "else",
    "propertyNames",
)
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_LANGUAGE_NAMES = {"java": "Java", "javascript": "JavaScript"}


def _json_type(name: object) -> str | None:
    """Map one BFCL type name; ``None`` = no constraint."""
    if not isinstance(name, str) or name in NO_TYPE_CONSTRAINT:
        return None
    return BFCL_TYPE_MAP.get(name, "string")


def _convert_type(value: object) -> str | list[str] | None:
    if isinstance(value, list):
        names = [_json_type(v) for v in value]
        if any(n is None for n in names):
            return None
        unique = list(dict.fromkeys(n for n in names if n is not None))
        return unique[0] if len(unique) == 1 else unique
    return _json_type(value)


def convert_bfcl_schema(node: object) -> Any:
    """Convert one BFCL schema node (and everything under it) to JSON Schema.

    Non-dict nodes (JSON Schema's boolean schemas) are returned unchanged.
    """
    if not isinstance(node, dict):
        return node if isinstance(node, bool) else {}
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "type":
            converted = _convert_type(value)
            if converted is not None:
                out["type"] = converted
        elif key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {str(k): convert_bfcl_schema(v) for k, v in value.items()}
        elif key in _SCHEMA_VALUES:
            out[key] = convert_bfcl_schema(value)
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            out[key] = [convert_bfcl_schema(v) for v in value]
        elif key == "items":
            if isinstance(value, list):
                out["prefixItems"] = [convert_bfcl_schema(v) for v in value]
            else:
                out["items"] = convert_bfcl_schema(value)
        elif key == "required":
            if isinstance(value, list) and all(isinstance(v, str) for v in value):
                out["required"] = list(dict.fromkeys(value))
        elif key == "description":
            out["description"] = value if isinstance(value, str) else str(value)
        else:
            out[key] = value
    return out


def _stringified_parameter(prop: object, language: BfclLanguage) -> dict[str, Any]:
    """Rule 3: a Java/JS parameter typed ``string`` with its declared type described."""
    prop = prop if isinstance(prop, dict) else {}
    lang = _LANGUAGE_NAMES[language]
    declared = prop.get("type")
    description = prop.get("description")
    text = description if isinstance(description, str) else ""
    if declared in (None, "any", "Any", ""):
        note = f"This parameter can be of any type of {lang} object in string representation."
    else:
        note = f"This is {lang} {declared} type parameter in string representation."
    items = prop.get("items")
    if isinstance(items, dict) and isinstance(items.get("type"), str) and items["type"]:
        note += (
            f" The list elements are of type {items['type']};"
            " they are not in string representation."
        )
    out: dict[str, Any] = {"type": "string", "description": f"{text} {note}".strip()}
    if isinstance(prop.get("default"), str):
        out["default"] = prop["default"]
    enum = prop.get("enum")
    if isinstance(enum, list) and enum and all(isinstance(v, str) for v in enum):
        out["enum"] = enum
    return out


def bfcl_function_to_tool(
    function: dict[str, Any], *, language: BfclLanguage = "python"
) -> dict[str, Any]:
    """Convert one BFCL function definition to ``{"type": "function", "function": {...}}``.

    Raises:
        ValueError: the definition has no string ``name``.
    """
    name = function.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError("BFCL function definition has no name")
    params = function.get("parameters")
    params = params if isinstance(params, dict) else {}
    if language in _LANGUAGE_NAMES:
        raw_props = params.get("properties")
        raw_props = raw_props if isinstance(raw_props, dict) else {}
        rest = {k: v for k, v in params.items() if k not in ("properties", "type")}
        schema = convert_bfcl_schema(rest)
        schema["properties"] = {
            str(k): _stringified_parameter(v, language) for k, v in raw_props.items()
        }
    else:
        schema = convert_bfcl_schema(params)
    schema["type"] = "object"
    schema.setdefault("properties", {})
    parameters = {"type": "object", "properties": schema.pop("properties"), **schema}
    body: dict[str, Any] = {"name": name.replace(".", "_")}
    description = function.get("description")
    if isinstance(description, str):
        body["description"] = description
    body["parameters"] = parameters
    return {"type": "function", "function": body}


def bfcl_functions_to_openai_tools(
    functions: object, *, language: BfclLanguage = "python"
) -> list[dict[str, Any]]:
    """Convert a BFCL ``function`` field (one object, a list, or their JSON text) to tools.

    Raises:
        ValueError: not a function object or list of them.
    """
    if isinstance(functions, str):
        functions = orjson.loads(functions)
    if isinstance(functions, dict):
        functions = [functions]
    if not isinstance(functions, list):
        raise ValueError(f"BFCL function field is {type(functions).__name__}, not a list")
    tools = []
    for item in functions:
        if not isinstance(item, dict):
            raise ValueError("BFCL function list holds a non-object")
        tools.append(bfcl_function_to_tool(item, language=language))
    return tools
