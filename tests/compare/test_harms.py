"""The harm detectors and tool-behaviour comparison on hand-made, tricky inputs.

Real examples from ../shared/data are in test_harms_real.py.
"""

from __future__ import annotations

import json

import pytest

from shadoweval.compare.harms import (
    DEFAULT_REFUSAL_PATTERNS,
    DEGENERATION_MIN_CHARS,
    REFUSAL_WINDOW_CHARS,
    SideContext,
    asks_for_language,
    compile_refusal_patterns,
    dominant_script,
    has_template_markers,
    is_degenerate,
    is_language_switch,
    is_missing_finish_reason,
    is_placeholder_json,
    is_refusal,
    is_runaway_length,
    normalised_arguments,
    script_letter_counts,
    side_harms,
    tool_changes,
    window_compression_ratio,
)
from shadoweval.errors import ConfigError
from shadoweval.records import (
    FinishReason,
    HarmKind,
    ResponseRecord,
    ToolCall,
    ToolChange,
    Usage,
    UsageSource,
)

DEFAULTS = compile_refusal_patterns()

# Hand-written prose: 20 different sentences, a normal numbered list of about 1,700 chars.
FACTS = (
    "Mercury is the smallest planet and the closest to the Sun.",
    "Venus has a thick atmosphere of carbon dioxide and sulphuric acid clouds.",
    "Earth is the only world known to host liquid water on its surface today.",
    "Mars shows dry river valleys carved when its climate was warmer.",
    "Jupiter's Great Red Spot is a storm larger than our whole planet.",
    "Saturn's rings are made of ice grains ranging from dust to boulders.",
    "Uranus rotates on its side, probably after an ancient collision.",
    "Neptune's winds reach two thousand kilometres per hour.",
    "Pluto was reclassified as a dwarf planet by the IAU in 2006.",
    "Ceres is the largest object in the main asteroid belt.",
    "Europa hides a salty ocean beneath a crust of ice.",
    "Titan has lakes of liquid methane and a dense nitrogen haze.",
    "Io is the most volcanically active body in the Solar System.",
    "Ganymede is bigger than Mercury and has its own magnetic field.",
    "Enceladus sprays geysers of water vapour from its south pole.",
    "Halley's comet returns roughly every seventy-six years.",
    "The Kuiper belt stretches beyond Neptune's orbit.",
    "Voyager 1 crossed into interstellar space in August 2012.",
    "A day on Venus lasts longer than its year.",
    "Olympus Mons on Mars is the tallest volcano we know of.",
)
NORMAL_LIST = "\n".join(f"{n}. {fact}" for n, fact in enumerate(FACTS, start=1))
NORMAL_CODE = '''Here is a small function:

```python
def median(values: list[float]) -> float:
    """Return the median of a non-empty list."""
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2


def mean(values: list[float]) -> float:
    return sum(values) / len(values)


if __name__ == "__main__":
    sample = [3.0, 1.0, 4.0, 1.5, 9.0, 2.6]
    print("median", median(sample))
    print("mean", mean(sample))
```

The median sorts a copy of the list; the mean adds every value once.
'''
TABLE = "| Planet | Moons | Rings |\n|---|---|---|\n" + "\n".join(
    f"| {fact.split()[0]} | {n} | {'yes' if n % 3 else 'no'} |" for n, fact in enumerate(FACTS)
)


def response(
    text: str | None = "Paris.",
    *,
    finish: FinishReason = FinishReason.STOP,
    raw: str | None = "stop",
    completion_tokens: int | None = None,
    tool_calls: tuple[ToolCall, ...] = (),
) -> ResponseRecord:
    use = (
        Usage()
        if completion_tokens is None
        else Usage(completion_tokens=completion_tokens, usage_source=UsageSource.REPORTED)
    )
    return ResponseRecord(
        status_code=200,
        text=text,
        finish_reason=finish,
        finish_reason_raw=raw,
        usage=use,
        tool_calls=tool_calls,
    )


def call(name: str, arguments: str, index: int = 0) -> ToolCall:
    return ToolCall(index=index, name=name, arguments=arguments)


# ------------------------------------------------------------------ degeneration


@pytest.mark.parametrize(
    "text",
    [
        "",
        "**TEST**",
        "Yes.",
        "ha ha ha",  # three words: emphasis, not a loop
        NORMAL_LIST,
        NORMAL_CODE,
        TABLE,
        NORMAL_LIST + "\n\n" + NORMAL_CODE + "\n\n" + TABLE,
    ],
    ids=["empty", "test", "yes", "short-loop", "list", "code", "table", "mixed"],
)
def test_normal_and_short_answers_are_not_degenerate(text: str) -> None:
    assert not is_degenerate(text)


def test_a_short_loop_is_degenerate() -> None:
    """240 characters never fill a deflate window; the word-loop measure sees them (issue 29)."""
    assert is_degenerate("ha " * 80)


def test_short_texts_have_no_ratio() -> None:
    assert len("ha " * 80) < DEGENERATION_MIN_CHARS
    assert window_compression_ratio("ha " * 80) == 0.0
    assert window_compression_ratio(NORMAL_LIST) < 3.0


@pytest.mark.parametrize(
    "loop",
    [
        " one by one by one" * 60,  # a word loop
        " #. " * 300,  # a hashtag loop
        "NTENT" * 300,  # no word boundary at all
        "\t" * 900,  # whitespace only
        "暴风雪礼赞" * 200,  # CJK: no spaces
        "\n\n**No-Ob Career Path:**\n\n**No-Ob Celebrity Path:**" * 40,  # a line loop
    ],
    ids=["words", "hashtags", "letters", "tabs", "cjk", "lines"],
)
def test_a_loop_taking_over_the_tail_is_degenerate(loop: str) -> None:
    text = NORMAL_LIST + "\n\nFinally," + loop
    assert is_degenerate(text)
    assert not is_degenerate(NORMAL_LIST)


def test_a_short_loop_in_a_long_answer_is_found_by_the_small_window() -> None:
    text = NORMAL_LIST + NORMAL_CODE + " a" * 300 + "\n" + NORMAL_LIST
    assert is_degenerate(text)


def test_a_loop_with_a_long_period_is_found_by_the_large_window() -> None:
    block = (
        "      - name: Deploy to production\n        uses: appleboy/ssh-action@v0\n"
        "        with:\n          host: ${{ secrets.HOST }}\n"
        "          username: ${{ secrets.USERNAME }}\n          key: ${{ secrets.KEY }}\n\n"
    )
    assert len(block) > 200
    assert is_degenerate(NORMAL_CODE + block * 12)


# ------------------------------------------------------------------ runaway length


def test_runaway_length() -> None:
    assert is_runaway_length(response(finish=FinishReason.LENGTH, raw="length"), None)
    assert is_runaway_length(response(completion_tokens=256), 256)
    assert is_runaway_length(response(completion_tokens=300), 256)
    assert not is_runaway_length(response(completion_tokens=255), 256)
    assert not is_runaway_length(response(completion_tokens=5000), None)
    assert not is_runaway_length(response(), 256)  # no usage reported: unknown, not runaway


# ------------------------------------------------------------------ refusal


@pytest.mark.parametrize(
    "text",
    [
        "I can't help with that.",
        "I can’t help with that request.",  # a typographic apostrophe
        "  \n I cannot assist with this request.",
        "I'm sorry, but I can't do that.",
        "I apologize, but as an AI I am not able to browse the web.",
        "As an AI language model, I don't have opinions, but here are some views: …",
        "I'm unable to provide medical advice.",
        "I must respectfully decline.",
        "I'm not comfortable writing that.",
        "That's not something I can help with.",
        "It is not appropriate for me to speculate.",
        "i won't write that.",
    ],
)
def test_refusals(text: str) -> None:
    assert is_refusal(text, DEFAULTS)


@pytest.mark.parametrize(
    "text",
    [
        None,
        "",
        "Sorry to hear that! Here are some ideas.",
        "I cannot stress enough how important sleep is.",
        "The capital of France is Paris.",
        "I'm sorry for your loss. Here is how to comfort a friend.",
        # A refusal mentioned after the first 300 characters is not one.
        "A good support bot answers politely. " * 9 + "It may say 'I can't help with that'.",
    ],
)
def test_not_refusals(text: str | None) -> None:
    assert not is_refusal(text, DEFAULTS)


def test_refusal_reads_only_the_start() -> None:
    lead = "x" * (REFUSAL_WINDOW_CHARS - 10)
    assert not is_refusal(lead + " I can't help with that.", DEFAULTS)
    assert is_refusal("x" * 10 + " I can't help with that.", DEFAULTS)


def test_custom_patterns_replace_the_defaults() -> None:
    custom = compile_refusal_patterns([r"\bnope\b"])
    assert custom.patterns == (r"\bnope\b",)
    assert is_refusal("NOPE, not doing it", custom)
    assert not is_refusal("I can't help with that.", custom)
    assert not is_refusal("I can't help with that.", compile_refusal_patterns([]))
    assert compile_refusal_patterns(None).patterns == DEFAULT_REFUSAL_PATTERNS
    assert compile_refusal_patterns(None) is compile_refusal_patterns(None)  # cached


@pytest.mark.parametrize(
    ("pattern", "says"),
    [
        ("(unclosed", "'(unclosed' is not a valid regular expression"),
        ("a*", "'a*' matches the empty text"),
        ("  ", "a pattern is blank"),
    ],
)
def test_a_bad_pattern_is_a_config_error_naming_it(pattern: str, says: str) -> None:
    with pytest.raises(ConfigError, match=r"compare\.refusal_patterns") as info:
        compile_refusal_patterns([r"\bok\b", pattern])
    assert says in str(info.value)
    assert info.value.field == "compare.refusal_patterns"
    assert info.value.value == pattern


def test_every_default_pattern_compiles_and_needs_text() -> None:
    compiled = compile_refusal_patterns(DEFAULT_REFUSAL_PATTERNS)
    assert len(compiled.compiled) == len(DEFAULT_REFUSAL_PATTERNS)
    assert all(regex.search("") is None for regex in compiled.compiled)


# ------------------------------------------------------------------ finish reason, markers


def test_missing_finish_reason() -> None:
    assert is_missing_finish_reason(response(raw=None, finish=FinishReason.UNKNOWN))
    assert not is_missing_finish_reason(response(raw="stop"))
    assert not is_missing_finish_reason(response(raw="eos", finish=FinishReason.UNKNOWN))


def test_template_markers() -> None:
    assert has_template_markers("Sure.[/INST] And then <</SYS>>")
    assert has_template_markers("done<|im_end|>")
    assert not has_template_markers("Use [INST like this")
    assert not has_template_markers(None)


# ------------------------------------------------------------------ language switch

ENGLISH_PROMPT = "How can you tell whether a restaurant is popular with locals or tourists?"
CHINESE_ANSWER = (
    "观察顾客：如果餐厅里大多数顾客都是讲当地语言或者看起来像是当地人，"
    "那么这可能是当地人常去的地方。反之，如果大多数顾客都是游客，那么它更受游客欢迎。"
)


def test_scripts_are_counted_per_letter() -> None:
    counts = script_letter_counts("Hello мир 你好 こんにちは 안녕 שלום مرحبا नमस्ते Γειά ไทย")
    assert counts["Latin"] == 5
    assert counts["Cyrillic"] == 3
    assert counts["Han"] == 2
    assert counts["Kana"] == 5
    assert counts["Hangul"] == 2
    assert counts["Hebrew"] == 4
    assert counts["Arabic"] == 5
    assert counts["Devanagari"] >= 3
    assert counts["Greek"] == 4
    assert counts["Thai"] >= 2
    assert script_letter_counts("Ｆｕｌｌ") == {"Latin": 4}  # full-width forms
    assert script_letter_counts("12345 !?, 🙂🙂") == {}


def test_dominant_script_pools_han_and_kana() -> None:
    assert dominant_script(script_letter_counts("東京の天気はどうですか")) == "Japanese"
    assert dominant_script(script_letter_counts("北京今天天气怎么样")) == "Han"
    assert dominant_script(script_letter_counts("ok"), min_letters=12) is None
    assert dominant_script({}) is None


def test_code_blocks_and_urls_are_not_prose() -> None:
    text = "```python\n# комментарий на русском языке, очень длинный\nx = 1\n```\nSee https://пример.рф/путь"
    assert script_letter_counts(text)["Cyrillic"] == 0
    assert script_letter_counts("Use `переменная` here")["Cyrillic"] == 0


def test_an_answer_in_another_script_is_a_switch() -> None:
    assert is_language_switch(CHINESE_ANSWER, ENGLISH_PROMPT)
    assert is_language_switch(
        "Here is the answer in English, explained at length.", "请解释一下量子纠缠是什么意思"
    )


@pytest.mark.parametrize(
    ("answer", "prompt"),
    [
        (CHINESE_ANSWER, "Translate this paragraph into Chinese: " + ENGLISH_PROMPT),
        (CHINESE_ANSWER, "Answer in Mandarin please: " + ENGLISH_PROMPT),
        (
            "Voici la réponse en français, avec quelques détails de plus.",
            "请用法语回答：今天天气怎么样",
        ),
        (
            "Sure, here is the answer in English with a few details.",
            "请用英文回答：今天天气怎么样？",
        ),
        (
            "東京の天気は晴れです。明日は雨が降るでしょう。気温は二十度くらいです。",
            "Write a Japanese haiku",
        ),
        ("Привет! Как дела? Это пример текста на русском языке.", "Say hello in Russian, please"),
    ],
    ids=["translate", "mandarin", "french-by-chinese-name", "english", "japanese", "russian"],
)
def test_a_requested_language_is_no_switch(answer: str, prompt: str) -> None:
    assert not is_language_switch(answer, prompt)


@pytest.mark.parametrize(
    ("answer", "prompt"),
    [
        ("你好", ENGLISH_PROMPT),  # too short to tell
        (
            "```python\nprint('你好，世界！这是一个很长的字符串，用来测试代码块被忽略')\n```",
            ENGLISH_PROMPT,
        ),
        (CHINESE_ANSWER, "?"),  # no letters in the prompt
        (CHINESE_ANSWER, "你好吗？今天过得怎么样？请告诉我一些有趣的事情"),  # same script
        ("Voici la réponse en français, bien plus longue que nécessaire.", ENGLISH_PROMPT),
        (None, ENGLISH_PROMPT),
        (CHINESE_ANSWER, None),
    ],
    ids=[
        "short",
        "code-only",
        "no-prompt-letters",
        "same-script",
        "same-script-french",
        "no-answer",
        "no-prompt",
    ],
)
def test_not_a_switch(answer: str | None, prompt: str | None) -> None:
    assert not is_language_switch(answer, prompt)


def test_explain_in_english_answered_in_chinese_stays_a_switch() -> None:
    prompt = "Explain in simple English how a refrigerator works."
    assert not asks_for_language(prompt, "Han")
    assert is_language_switch(CHINESE_ANSWER, prompt)


# ------------------------------------------------------------------ placeholder JSON

SCHEMA = {
    "type": "object",
    "properties": {
        "answer": {"type": "string"},
        "source": {
            "type": "object",
            "properties": {"url": {"type": "string"}},
            "required": ["url"],
        },
    },
    "required": ["answer"],
}


@pytest.mark.parametrize(
    "text",
    [
        "{}",
        "[]",
        "  {}\n",
        "```json\n{}\n```",
        'Here you go: {"answer": "", "tags": [], "meta": {"note": null}}',
        '{"other": 1}',  # misses the required "answer"
        '{"answer": "x", "source": {}}',  # the nested "url" is required
    ],
)
def test_placeholders(text: str) -> None:
    assert is_placeholder_json(text, SCHEMA)


@pytest.mark.parametrize(
    ("text", "schema"),
    [
        ('{"answer": "Paris"}', SCHEMA),
        ('{"answer": "Paris", "source": {"url": "https://x"}}', SCHEMA),
        ('{"count": 0}', None),  # 0 is a value
        ('{"flag": false}', None),
        ("0", None),  # a scalar is a value
        ("not json at all", SCHEMA),  # the format checks count that
        ("", SCHEMA),
        (None, SCHEMA),
        ('{"other": 1}', None),  # no schema: nothing is required
    ],
)
def test_not_placeholders(text: str | None, schema: dict[str, object] | None) -> None:
    assert not is_placeholder_json(text, schema)


def test_array_items_follow_the_items_schema() -> None:
    schema = {"type": "array", "items": SCHEMA}
    assert is_placeholder_json('[{"answer": "x"}, {"other": 2}]', schema)
    assert not is_placeholder_json('[{"answer": "x"}, {"answer": "y"}]', schema)


# ------------------------------------------------------------------ side_harms


def test_side_harms_in_declaration_order() -> None:
    context = SideContext(prompt=ENGLISH_PROMPT, max_tokens=10, json_expected=True, schema=SCHEMA)
    resp = response("{}<|im_end|>", raw=None, finish=FinishReason.UNKNOWN, completion_tokens=10)
    harms = side_harms(resp, text=resp.text or "", context=context)
    # A broken template's JSON answer: {} followed by a marker; the {} is still found.
    assert harms == (
        HarmKind.RUNAWAY_LENGTH,
        HarmKind.MISSING_FINISH_REASON,
        HarmKind.TEMPLATE_MARKERS,
        HarmKind.PLACEHOLDER_JSON,
    )
    assert HarmKind.MISSING_FINISH_REASON not in side_harms(
        resp, text=resp.text or "", context=context, check_finish_reason=False
    )


def test_side_harms_json_only_when_expected() -> None:
    resp = response("{}")
    assert side_harms(resp, text="{}", context=SideContext(json_expected=True)) == (
        HarmKind.PLACEHOLDER_JSON,
    )
    assert side_harms(resp, text="{}", context=SideContext()) == ()


def test_side_harms_default_context_detects_refusals() -> None:
    resp = response("I'm sorry, but I can't help with that.")
    assert side_harms(resp, text=resp.text or "", context=SideContext()) == (HarmKind.REFUSAL,)


def test_degeneration_reads_content_not_tool_arguments() -> None:
    deck = ",".join(f'{{"rank":"{r}","suit":"Hearts"}}' for r in range(60))
    resp = response("", tool_calls=(call("find_card", f'{{"deck":[{deck}]}}'),))
    text = f'find_card({{"deck":[{deck}]}})'
    assert is_degenerate(text)
    assert HarmKind.DEGENERATION not in side_harms(resp, text=text, context=SideContext())


# ------------------------------------------------------------------ tool changes

A = call("get_weather", '{"city": "Paris", "unit": "c"}', 0)
B = call("get_time", '{"tz": "Europe/Paris"}', 1)


def test_no_calls_either_side() -> None:
    assert tool_changes([], []) == ()


def test_text_instead_of_call_and_the_reverse() -> None:
    assert tool_changes([A], []) == (ToolChange.TEXT_INSTEAD_OF_CALL,)
    assert tool_changes([], [A]) == (ToolChange.CALL_INSTEAD_OF_TEXT,)


def test_function_changed() -> None:
    other = call("get_forecast", '{"city": "Paris", "unit": "c"}')
    assert tool_changes([A], [other]) == (ToolChange.FUNCTION_CHANGED,)
    twice = call("get_weather", '{"city": "Lyon"}', 1)
    assert tool_changes([A], [A, twice]) == (ToolChange.FUNCTION_CHANGED,)  # another count


def test_arguments_changed() -> None:
    lyon = call("get_weather", '{"city": "Lyon", "unit": "c"}')
    assert tool_changes([A], [lyon]) == (ToolChange.ARGUMENTS_CHANGED,)
    raw = call("get_weather", "city=Paris")
    assert tool_changes([raw], [call("get_weather", " city=Paris ")]) == ()
    assert tool_changes([raw], [call("get_weather", "city=Lyon")]) == (
        ToolChange.ARGUMENTS_CHANGED,
    )


def test_key_order_whitespace_and_integral_floats_never_count() -> None:
    same = call("get_weather", '{ "unit":"c",\n  "city":"Paris" }')
    assert tool_changes([A], [same]) == ()
    assert normalised_arguments('{"n": 1.0, "x": [2.0, 2.5]}') == '{"n":1,"x":[2,2.5]}'
    assert normalised_arguments('{"n": true}') == '{"n":true}'  # a bool stays a bool
    assert tool_changes([call("f", '{"n": 1}')], [call("f", '{"n": 1.0}')]) == ()


def test_order_changed_unless_order_free() -> None:
    swapped = [call(B.name, B.arguments, 0), call(A.name, A.arguments, 1)]
    assert tool_changes([A, B], swapped) == (ToolChange.ORDER_CHANGED,)
    assert tool_changes([A, B], swapped, order_free=True) == ()
    # The index decides the order, not the position in the sequence.
    assert tool_changes([B, A], [A, B]) == ()


# ------------------------------------------------------------------ settings


def test_refusal_patterns_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from shadoweval.config import load_settings

    assert (
        load_settings().compare.refusal_patterns is None
    )  # the defaults of shadoweval.compare.harms
    monkeypatch.setenv("SHADOWEVAL_COMPARE__REFUSAL_PATTERNS", json.dumps([r"\bnope\b"]))
    patterns = load_settings().compare.refusal_patterns
    assert patterns == (r"\bnope\b",)
    assert is_refusal("Nope.", compile_refusal_patterns(patterns))


@pytest.mark.parametrize("pattern", ["(unclosed", "x?", " "])
def test_a_bad_pattern_in_the_environment_is_refused(
    monkeypatch: pytest.MonkeyPatch, pattern: str
) -> None:
    from shadoweval.config import load_settings

    monkeypatch.setenv("SHADOWEVAL_COMPARE__REFUSAL_PATTERNS", json.dumps([r"\bok\b", pattern]))
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert info.value.field == "compare.refusal_patterns"
    if pattern.strip():
        assert repr(pattern) in str(info.value)
    else:
        assert "blank" in str(info.value)
