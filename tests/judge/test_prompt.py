"""The pairwise prompt: both orders, what is shown, limits, and a stable hash."""

from __future__ import annotations

import hashlib

import orjson
import pytest

from judge import PROMPT_SHA256, Answer, build_messages
from judge.prompt import (
    MAX_ANSWER_CHARS,
    MAX_CONVERSATION_CHARS,
    PROMPT_VERSION,
    SYSTEM_PROMPT,
    USER_TEMPLATE,
    render_answer,
    render_conversation,
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
