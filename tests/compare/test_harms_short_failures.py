"""Short failures the window detectors missed (issue 29 items 8d and 10), on real snippets.

Gemma-3-270M repeated a line 3+ times in 13 of 60 answers and wrote CJK fragments into
English answers in 10 of 60, and both detectors read 0%: a 60-character line said three
times never fills a 512-character deflate window, and a two-character fragment never
changes an answer's dominant script. The snippets are quoted from the AlpacaEval answers in
``../shared/data/alpaca_eval`` (model and 0-based row named on each); the whole files are
measured in ``test_harms_real.py`` and ``scripts/detector_recall.py``.
"""

from __future__ import annotations

import pytest

from shadoweval.compare.harms import (
    SideContext,
    cjk_fragments,
    is_cjk_fragment_switch,
    is_degenerate,
    is_language_switch,
    is_line_loop,
    is_word_loop,
    longest_tandem_repeat,
    repetition_units,
    side_harms,
)
from shadoweval.records import FinishReason, HarmKind, ResponseRecord

# Meta-Llama-3.1-8B-Instruct-Turbo row 799 (an apology e-mail), its last 200 characters.
DEAR_RECIPIENT = (
    "You can expect to receive your order within the next [estimated delivery timeframe].\n\n"
    "Dear [Recipient],\n\nDear [Recipient]\n\nDear [Recipient]\n\nDear [Recipient]\n\n"
    "[Your Name]"
)
# The same model, row 510 (period dramas), its tail.
CELDA = (
    "   cabal\n   celda\n        el cab\n        celda\n    celda\n\n   celda\n\n   celda\n\n" * 2
)
# Gemma-3-270M's shape (issue 29 item 8d): a short answer that says one line three times.
GEMMA_SHAPE = (
    "The capital of France is Paris.\n"
    "The capital of France is Paris.\n"
    "The capital of France is Paris.\n"
)
NUMBERED_SHAPE = (
    "Here are three tips:\n"
    "1. Drink water every day.\n2. Drink water every day.\n3. Drink water every day."
)


@pytest.mark.parametrize("text", [DEAR_RECIPIENT, CELDA, GEMMA_SHAPE, NUMBERED_SHAPE])
def test_a_short_line_loop_is_degenerate(text: str) -> None:
    assert len(text) < 512  # too short for a deflate window
    assert is_degenerate(text)


def test_a_block_of_two_lines_repeated_three_times_is_a_loop() -> None:
    text = "User: What is 2+2?\nModel: 4\n" * 3
    assert longest_tandem_repeat(repetition_units(text), 4) == (3, 2)
    assert is_line_loop(text)


def test_word_loops() -> None:
    # Meta-Llama-3.1-8B-Instruct-Turbo row 614: 'a 0 a 0 a 0 …'
    assert is_word_loop("is a plant a tree, in a 0 a 0 a a 0 a 0 a 0 a 0 a 0 a a 0 a 0 a is a")
    # row 372: 'Win: Win: Win Win Win …'
    assert is_word_loop("R Win: K: Win: Win: Win: Win: Win: Win: Win Win Win Win Win, not, bu")
    assert not is_word_loop(
        "Who wears short shorts, who wears short shorts... WHO WEARS SHORT SHORTS?"
    )
    # Qwen1.5-72B-Chat row 272: a product written out, not a loop.
    assert not is_word_loop(
        "3 (rows) * 3 (rows) * 3 (rows) * 4 (columns) * 4 (columns) * 4 (columns)"
    )
    assert not is_word_loop("No, no, no. That is not how it works.")


RECIPES = (  # Meta-Llama-3-8B-Instruct row 601: the same field line, between other lines
    "**Monday**\n\n* One-Pot Pasta with Vegetables: Cook pasta in one pot.\n"
    "* Prep Time: 15 minutes\n* Cook Time: 20 minutes\n\n"
    "**Tuesday**\n\n* Baked Salmon with Roasted Vegetables: Season salmon fillets.\n"
    "* Prep Time: 15 minutes\n* Cook Time: 12-15 minutes\n\n"
    "**Wednesday**\n\n* Turkey and Avocado Wrap: Fill whole wheat tortillas.\n"
    "* Prep Time: 15 minutes\n* Cook Time: 0 minutes\n"
)
CHORUS = (  # Meta-Llama-3-8B-Instruct row 219: a chorus between verses
    "Chorus:\nOh, Jesus, my Redeemer, my heart beats for You alone\n"
    "In Your love, I find my peace, my refuge, my home\n\n"
    "Verse 2:\nThrough the trials and the fire, You've been my guiding light\n\n"
    "Chorus:\nOh, Jesus, my Redeemer, my heart beats for You alone\n"
    "In Your love, I find my peace, my refuge, my home\n\n"
    "Bridge:\nIn the silence, I hear Your voice\n\n"
    "Chorus:\nOh, Jesus, my Redeemer, my heart beats for You alone\n"
    "In Your love, I find my peace, my refuge, my home\n"
)
TABLE = (
    "| Name | Price |\n|------|-------|\n| A | 1 |\n|------|-------|\n| B | 2 |\n"
    "|------|-------|\n| C | 3 |\n|------|-------|\n"
)
CODE = (
    "Example:\n```python\nx = 1\nx = 1\nx = 1\n```\nExample:\n```python\ny = 2\n```\n"
    "Example:\n```python\nz = 3\n```\n"
)
BULLETS = "- \n- \n- \n---\n---\n---\n* * *\n* * *\n* * *\nDone."


@pytest.mark.parametrize("text", [RECIPES, CHORUS, TABLE, CODE, BULLETS, "**TEST**", "Yes."])
def test_legitimate_repeats_are_not_degenerate(text: str) -> None:
    assert not is_degenerate(text)


# ------------------------------------------------------------------ CJK fragments

SKY_PROMPT = "What color is the sky"
SKY = (  # Qwen1.5-72B-Chat row 113
    "The color of the sky can vary depending on various factors such as time of day, weather "
    "conditions, and location. The exact shade of blue can range from a light blue to a "
    "deeper湛蓝. At sunrise and sunset, the sky can display a range of colors."
)
BEARS_PROMPT = "What are some species of bears that are now extinct?"
BEARS = (  # Qwen2-72B-Instruct row 25
    "5. **St. Kilda Bear (Ursus arctos恭)**: This small brown bear subspecies is believed to "
    "have lived on the St. Kilda archipelago."
)
COOKIES_PROMPT = (
    "Describe how to prepare the given food in your own words.\n\nChewy Chocolate Chip Cookies"
)
COOKIES = (  # Qwen1.5-72B-Chat row 604
    "Add the white granulated sugar and brown sugar, and continue beating the mixture until "
    "it's well combined and fluffy,大约2-3分钟。\n\n4. Crack in the two large eggs."
)


@pytest.mark.parametrize(
    ("answer", "prompt", "fragment"),
    [(SKY, SKY_PROMPT, "湛蓝"), (BEARS, BEARS_PROMPT, "恭"), (COOKIES, COOKIES_PROMPT, "大约")],
)
def test_cjk_fragments_in_an_english_answer_are_a_switch(
    answer: str, prompt: str, fragment: str
) -> None:
    assert fragment in cjk_fragments(answer)
    assert is_cjk_fragment_switch(answer, prompt)
    assert is_language_switch(answer, prompt)


TONG_SUI_PROMPT = (  # AlpacaEval row 94 (shortened)
    "I like to host guests at my home from time to time. I am interested in trying some Hong "
    "Kong  dishes. Can you give me a recipe for Tong Sui?"
)
TONG_SUI = (  # Qwen2-72B-Instruct row 94: a gloss, the dish's name in its own script
    "Tong Sui (糖水) refers to a wide variety of sweet soups and desserts that are very "
    "popular in Cantonese cuisine, including Hong Kong."
)
GO_PROMPT = (
    "Can you please provide me the names of the two players in the atomic bomb game (in go)?"
)
GO = (  # Qwen1.5-72B-Chat row 286: the language of the fragment is named
    'As for the referee, it\'s usually referred to as the "judge" or "仲裁" (arbitrator) in '
    'Chinese, "shinpan" in Japanese, or "referee" in English.'
)
MANDARIN_PROMPT = (  # AlpacaEval row 374
    "I am learning Mandarin. Could you give me some advice to memorize how to write Chinese "
    "characters and speed up my learning?"
)
MANDARIN = 'For example, imagine a "木" (tree) for "wood" and a "人" (person) carrying it.'


@pytest.mark.parametrize(
    ("answer", "prompt"),
    [
        (TONG_SUI, TONG_SUI_PROMPT),
        (GO, GO_PROMPT),
        (MANDARIN, MANDARIN_PROMPT),
        (
            "The character 愛 (ai) is the usual word for love in everyday writing.",
            "What does 愛 mean?",
        ),
        (
            "In Japanese you would say おはようございます (ohayou gozaimasu) in the morning.",
            "Translate 'good morning' for me, please.",
        ),
        (SKY.replace("湛蓝", "blue"), SKY_PROMPT),
        (
            "```python\nprint('你好')\n```\nThis prints a greeting to the console for the user.",
            SKY_PROMPT,
        ),
    ],
)
def test_glosses_and_asked_for_scripts_are_not_a_switch(answer: str, prompt: str) -> None:
    assert not is_cjk_fragment_switch(answer, prompt)
    assert not is_language_switch(answer, prompt)


def test_the_gate_reads_both_through_side_harms() -> None:
    """The gate's harm checks read :func:`side_harms`: the registry is unchanged."""
    context = SideContext(prompt=SKY_PROMPT)
    for text, kind in ((GEMMA_SHAPE, HarmKind.DEGENERATION), (SKY, HarmKind.LANGUAGE_SWITCH)):
        response = ResponseRecord(
            status_code=200, text=text, finish_reason_raw="stop", finish_reason=FinishReason.STOP
        )
        assert kind in side_harms(response, text=text, context=context)


def test_a_paragraph_repeated_three_times_is_a_loop() -> None:
    """Five sentences said three times: a period of 15 sentences, but of three lines."""
    paragraph = (
        "Snowflakes vary in size. A typical one is 1 cm across. It weighs little. "
        "It falls slowly. It melts fast."
    )
    text = "Here is the estimate.\n\n" + "\n\n".join([paragraph] * 3)
    assert is_line_loop(text)
    assert is_degenerate(text)
