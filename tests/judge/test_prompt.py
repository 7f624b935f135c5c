"""The pairwise prompt: both orders, what is shown, limits, the response formats, and a
stable hash per format."""

from __future__ import annotations

import hashlib

import orjson
import pytest

from shadoweval.judge import PROMPT_SHA256, Answer, build_messages
from shadoweval.judge.prompt import (
    JSON_SYSTEM_PROMPT,
    MAX_ANSWER_CHARS,
    MAX_CONVERSATION_CHARS,
    MAX_JSON_RATIONALE_CHARS,
    PROMPT_SHA256_BY_FORMAT,
    PROMPT_VERSION,
    RESPONSE_FORMATS,
    SYSTEM_PROMPT,
    USER_TEMPLATE,
    VERDICT_SCHEMA,
    prompt_format,
    prompt_sha256,
    render_answer,
    render_conversation,
    response_format_body,
    system_prompt,
)
from tests.judge.conftest import BAD, GOOD, make_pair


def test_baseline_first_shows_the_baseline_as_answer_a_and_vice_versa() -> None:
    pair = make_pair()
    _, first = build_messages(pair, "baseline_first")
    _, second = build_messages(pair, "candidate_first")
    a_block = "[Answer A]\n{}\n[End of Answer A]"
    assert a_block.format(BAD) in first["content"]
    assert a_block.format(GOOD) in second["content"]
    assert "[Answer B]\n" + GOOD in first["content"]
    with pytest.raises(ValueError, match="order must be"):
        build_messages(pair, "random")  # type: ignore[arg-type]


def test_the_conversation_keeps_roles_parts_and_tool_calls() -> None:
    text = render_conversation(
        [
            {"role": "system", "content": "Be brief."},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Look at this:"},
                    {"type": "image_url", "image_url": {"url": "data:..."}},
                ],
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"function": {"name": "get", "arguments": '{"q":"x"}'}}],
            },
            {"role": "tool", "content": "42"},
        ]
    )
    assert text == (
        "[system]\nBe brief.\n\n[user]\nLook at this:\n[image_url]\n\n"
        '[assistant]\nTool call: get({"q":"x"})\n\n[tool]\n42'
    )


def test_answers_show_tool_calls_errors_and_emptiness() -> None:
    calls = [{"index": 0, "name": "requests_get", "arguments": '{"url": "https://x"}'}]
    assert render_answer(Answer(text="", tool_calls=calls)) == (
        'Tool call: requests_get({"url": "https://x"})'
    )
    assert render_answer(Answer(text="  ")) == "(empty answer)"
    assert render_answer(Answer(error="http_status")) == (
        "(no answer: the request failed: http_status)"
    )


def test_tools_offered_are_shown() -> None:
    pair = make_pair()
    tools = [{"type": "function", "function": {"name": "weather", "parameters": {}}}]
    pair = type(pair)(**{**{f: getattr(pair, f) for f in pair.__slots__}, "tools": tools})
    _, user = build_messages(pair, "baseline_first")
    assert '[Tools offered]\n[{"type":"function","function":{"name":"weather"' in user["content"]


def test_long_parts_are_cut_with_a_marker() -> None:
    long_answer = render_answer(Answer(text="y" * (MAX_ANSWER_CHARS + 10)))
    assert long_answer.endswith("…[cut: 10 more characters]")
    long_talk = render_conversation([{"role": "user", "content": "z" * 20_000}])
    assert f"…[cut: {20_000 + 7 - MAX_CONVERSATION_CHARS} characters]…" in long_talk


def test_the_prompt_hash_is_sha256_of_template_version_and_limits() -> None:
    canonical = orjson.dumps(
        {
            "version": PROMPT_VERSION,
            "system": SYSTEM_PROMPT,
            "user": USER_TEMPLATE,
            "max_conversation_chars": 16_000,
            "max_answer_chars": 8_000,
            "max_tools_chars": 6_000,
        },
        option=orjson.OPT_SORT_KEYS,
    )
    assert hashlib.sha256(canonical).hexdigest() == PROMPT_SHA256
    assert SYSTEM_PROMPT.endswith("VERDICT: A\nVERDICT: B\nVERDICT: TIE")


def test_the_text_hash_is_unchanged_and_each_format_has_its_own() -> None:
    """The ``text`` prompt hash is the one runs were frozen with before the JSON formats
    existed; ``json_schema`` and ``json_object`` differ from it and from each other, and
    each maps back to its format."""
    assert PROMPT_SHA256 == prompt_sha256("text") == PROMPT_SHA256_BY_FORMAT["text"]
    assert PROMPT_SHA256.startswith("27b29b07201d")  # stored in runs judged before
    hashes = {prompt_sha256(fmt) for fmt in RESPONSE_FORMATS}
    assert len(hashes) == 3
    for fmt in RESPONSE_FORMATS:
        assert prompt_format(prompt_sha256(fmt)) == fmt
    assert prompt_format("0" * 64) is None
    canonical = orjson.dumps(
        {
            "version": PROMPT_VERSION,
            "system": JSON_SYSTEM_PROMPT,
            "user": USER_TEMPLATE,
            "max_conversation_chars": 16_000,
            "max_answer_chars": 8_000,
            "max_tools_chars": 6_000,
            "response_format": response_format_body("json_schema"),
        },
        option=orjson.OPT_SORT_KEYS,
    )
    assert hashlib.sha256(canonical).hexdigest() == prompt_sha256("json_schema")
    with pytest.raises(ValueError, match="response_format must be one of"):
        prompt_sha256("yaml")  # type: ignore[arg-type]


def test_the_json_formats_ask_for_the_object_instead_of_the_verdict_line() -> None:
    pair = make_pair()
    text_system, text_user = build_messages(pair, "baseline_first")
    json_system, json_user = build_messages(pair, "baseline_first", response_format="json_schema")
    assert text_system["content"] == SYSTEM_PROMPT
    assert json_system["content"] == JSON_SYSTEM_PROMPT == system_prompt("json_object")
    assert "VERDICT:" not in json_system["content"]
    assert json_system["content"].endswith('{"rationale": "...", "verdict": "A" | "B" | "TIE"}')
    assert f"at most {MAX_JSON_RATIONALE_CHARS} characters" in json_system["content"]
    # The criteria and the shown pair are the same in every format.
    criteria = SYSTEM_PROMPT.split("Explain your decision")[0]
    assert json_system["content"].startswith(criteria)
    assert json_user == text_user


def test_response_format_bodies_per_dialect() -> None:
    assert response_format_body("text") is None
    openai = response_format_body("json_schema")
    assert openai == {
        "type": "json_schema",
        "json_schema": {"name": "pairwise_verdict", "strict": True, "schema": VERDICT_SCHEMA},
    }
    schema = openai["json_schema"]["schema"]
    assert schema["required"] == ["rationale", "verdict"]
    assert schema["additionalProperties"] is False
    assert schema["properties"]["verdict"]["enum"] == ["A", "B", "TIE"]
    assert "maxLength" not in schema["properties"]["rationale"]  # OpenAI strict refuses it
    llama = response_format_body("json_object")
    assert llama is not None
    assert llama["type"] == "json_object"
    assert llama["schema"]["properties"]["rationale"] == {
        "type": "string",
        "maxLength": MAX_JSON_RATIONALE_CHARS,
    }
    assert llama["schema"]["properties"]["verdict"] == schema["properties"]["verdict"]
    assert "maxLength" not in VERDICT_SCHEMA["properties"]["rationale"]  # never mutated
