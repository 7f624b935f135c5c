"""Language switch: an answer written in another script than the prompt, unasked."""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Mapping
from functools import lru_cache
from typing import Final

LANGUAGE_SWITCH_MIN_ANSWER_LETTERS: Final = 40
"""An answer with fewer letters (outside code and URLs) is never called a switch."""
LANGUAGE_SWITCH_MIN_PROMPT_LETTERS: Final = 12
"""A prompt with fewer letters has no reliable script."""
_KANA_SHARE_JAPANESE: Final = 0.1
CJK_SCRIPTS: Final = frozenset({"Han", "Kana", "Hangul"})
"""Scripts whose fragments inside a Latin answer are a script switch (Han, Kana, Hangul)."""
GLOSS_WINDOW_CHARS: Final = 40
"""A CJK fragment with a CJK language's name this close (either side) is a gloss."""

_CODE_FENCE: Final = re.compile(r"(?:```|~~~).*?(?:```|~~~|\Z)", re.DOTALL)
_INLINE_CODE: Final = re.compile(r"`[^`\n]*`")
_URL: Final = re.compile(r"\b(?:https?://|www\.)\S+", re.IGNORECASE)

_SCRIPT_WORDS: Final[Mapping[str, str]] = {
    "LATIN": "Latin",
    "GREEK": "Greek",
    "COPTIC": "Coptic",
    "CYRILLIC": "Cyrillic",
    "ARMENIAN": "Armenian",
    "HEBREW": "Hebrew",
    "ARABIC": "Arabic",
    "SYRIAC": "Syriac",
    "THAANA": "Thaana",
    "DEVANAGARI": "Devanagari",
    "BENGALI": "Bengali",
    "GURMUKHI": "Gurmukhi",
    "GUJARATI": "Gujarati",
    "ORIYA": "Oriya",
    "TAMIL": "Tamil",
    "TELUGU": "Telugu",
    "KANNADA": "Kannada",
    "MALAYALAM": "Malayalam",
    "SINHALA": "Sinhala",
    "THAI": "Thai",
    "LAO": "Lao",
    "TIBETAN": "Tibetan",
    "MYANMAR": "Myanmar",
    "GEORGIAN": "Georgian",
    "HANGUL": "Hangul",
    "ETHIOPIC": "Ethiopic",
    "CHEROKEE": "Cherokee",
    "KHMER": "Khmer",
    "MONGOLIAN": "Mongolian",
    "HIRAGANA": "Kana",
    "KATAKANA": "Kana",
    "CJK": "Han",
    "IDEOGRAPHIC": "Han",
    "BOPOMOFO": "Han",
    "YI": "Yi",
}


@lru_cache(maxsize=65536)
def _script_of(char: str) -> str | None:
    if char.isascii():
        return "Latin" if char.isalpha() else None
    if not unicodedata.category(char).startswith("L"):
        return None
    words = unicodedata.name(char, "").split()
    if words and words[0] in ("FULLWIDTH", "HALFWIDTH"):
        words = words[1:]
    return _SCRIPT_WORDS.get(words[0]) if words else None


def code_fence_segments(text: str) -> list[tuple[str, bool]]:
    """``text`` cut at fenced code blocks: ``(segment, is_code)`` in order, nothing lost.

    A fence opens with ```` ``` ```` or ``~~~`` and closes with either (an unclosed
    fence runs to the end of the text); the fences belong to the code segment. Empty
    prose segments are left out.
    """
    segments: list[tuple[str, bool]] = []
    position = 0
    for match in _CODE_FENCE.finditer(text):
        if match.start() > position:
            segments.append((text[position : match.start()], False))
        segments.append((match.group(0), True))
        position = match.end()
    if position < len(text):
        segments.append((text[position:], False))
    return segments


def _prose(text: str) -> str:
    return _URL.sub(" ", _INLINE_CODE.sub(" ", _CODE_FENCE.sub(" ", text)))


def script_letter_counts(text: str | None) -> Counter[str]:
    """Letters per Unicode script in ``text``, leaving out code and URLs.

    Fenced code blocks (```` ``` ```` or ``~~~``, an unclosed fence runs to the end),
    inline code spans and ``http(s)://`` / ``www.`` URLs are removed first. A letter is
    a character of Unicode category L*; its script is the first word of its Unicode
    name (``LATIN SMALL LETTER A`` → Latin, ``CJK UNIFIED IDEOGRAPH-4E2D`` → Han,
    ``HIRAGANA LETTER A`` → Kana; full- and half-width forms count as their base
    script). Letters of no listed script (modifier letters, mathematical alphanumerics)
    are not counted. Digits, punctuation and emoji are not letters.
    """
    counts: Counter[str] = Counter()
    if not text:
        return counts
    for char in _prose(text):
        script = _script_of(char)
        if script is not None:
            counts[script] += 1
    return counts


def dominant_script(counts: Mapping[str, int], *, min_letters: int = 1) -> str | None:
    """The script with the most letters, ``None`` under ``min_letters`` letters in all.

    Han and Kana letters are pooled, since Japanese writes with both: the pool is
    ``Japanese`` when Kana are at least 10% of it, else ``Han`` (Chinese). Ties go to
    the script named first in alphabetical order (deterministic).
    """
    total = sum(counts.values())
    if total < min_letters or total == 0:
        return None
    pooled = dict(counts)
    kana = pooled.pop("Kana", 0)
    han = pooled.pop("Han", 0)
    if kana + han:
        name = "Japanese" if kana >= _KANA_SHARE_JAPANESE * (kana + han) else "Han"
        pooled[name] = kana + han
    return min(pooled, key=lambda script: (-pooled[script], script))


_TRANSLATION: Final = re.compile(
    r"\b(?:translat\w*|transliterat\w*|romani[sz]\w*)|翻译|翻譯|翻訳|번역|перев",
    re.IGNORECASE,
)
# fmt: off
_LANGUAGES: Final[Mapping[str, tuple[str, ...]]] = {
    "Latin": (
        "english", "french", "german", "spanish", "italian", "portuguese", "dutch",
        "swedish", "norwegian", "danish", "finnish", "icelandic", "polish", "czech",
        "slovak", "slovenian", "croatian", "bosnian", "hungarian", "romanian", "turkish",
        "vietnamese", "indonesian", "malay", "tagalog", "filipino", "swahili", "latin",
        "catalan", "basque", "galician", "irish", "welsh", "estonian", "latvian",
        "lithuanian", "albanian", "maltese", "esperanto", "afrikaans", "hawaiian",
        "pinyin", "romaji", "français", "español", "deutsch", "italiano", "português",
        "英文", "英语", "英語", "영어", "法语", "法語", "法文", "德语", "德語", "德文",
        "西班牙语", "西班牙語", "意大利语", "葡萄牙语", "越南语",
    ),
    "Cyrillic": (
        "russian", "ukrainian", "belarusian", "bulgarian", "serbian", "macedonian",
        "kazakh", "kyrgyz", "mongolian", "tajik", "cyrillic", "русск", "українськ",
        "俄语", "俄語", "俄文",
    ),
    "Greek": ("greek", "ελληνικά"),
    "Arabic": ("arabic", "persian", "farsi", "urdu", "pashto", "العربية", "فارسی", "阿拉伯语"),
    "Hebrew": ("hebrew", "yiddish", "עברית"),
    "Han": (
        "chinese", "mandarin", "cantonese", "hanzi", "中文", "汉语", "漢語", "普通话",
        "简体", "繁體",
    ),
    "Japanese": ("japanese", "kanji", "hiragana", "katakana", "日本語", "日语", "日文"),
    "Hangul": ("korean", "hangul", "한국어", "韩语", "韓語"),
    "Devanagari": ("hindi", "marathi", "nepali", "sanskrit", "devanagari", "हिन्दी"),
    "Bengali": ("bengali", "bangla", "assamese"),
    "Tamil": ("tamil",),
    "Telugu": ("telugu",),
    "Kannada": ("kannada",),
    "Malayalam": ("malayalam",),
    "Gujarati": ("gujarati",),
    "Gurmukhi": ("punjabi", "gurmukhi"),
    "Thai": ("thai", "ภาษาไทย"),
    "Lao": ("lao", "laotian"),
    "Khmer": ("khmer", "cambodian"),
    "Myanmar": ("burmese", "myanmar"),
    "Georgian": ("georgian",),
    "Armenian": ("armenian",),
    "Ethiopic": ("amharic", "tigrinya", "ethiopic"),
    "Sinhala": ("sinhala", "sinhalese"),
    "Tibetan": ("tibetan",),
}
"""Language names (English and native) by the script they are written in."""
# fmt: on
_LANGUAGE_PATTERNS: Final[Mapping[str, re.Pattern[str]]] = {
    script: re.compile(
        "|".join(rf"\b{re.escape(name)}" if name.isascii() else re.escape(name) for name in names),
        re.IGNORECASE,
    )
    for script, names in _LANGUAGES.items()
}


def asks_for_language(prompt: str, script: str) -> bool:
    """The prompt asks for a translation, or names a language written in ``script``.

    Rule: a translation verb anywhere in the prompt (``translat*``, ``transliterat*``,
    ``romanis/ze*``, 翻译/翻譯/翻訳, 번역, перев…) excuses any script; otherwise the
    prompt must name a language (English or native name, e.g. "in French", "用英文",
    "Japanese haiku") whose script is ``script`` (``Japanese`` and ``Han`` excuse each
    other: kanji are Han). So "answer in English" excuses a Latin answer to a Chinese
    prompt, but a Chinese answer to "explain in simple English" stays a switch.
    """
    if _TRANSLATION.search(prompt):
        return True
    scripts = {script, "Han", "Japanese"} if script in ("Han", "Japanese") else {script}
    return any(
        (pattern := _LANGUAGE_PATTERNS.get(name)) is not None and pattern.search(prompt)
        for name in scripts
    )


_GLOSS_OPEN: Final = re.compile(r"[A-Za-z][.'’]?\s*[(（]\s*[\"'“‘「]?$")
_GLOSS_CLOSE: Final = re.compile(r"^[\"'”’」]?\s*[)）]")
_CJK_LANGUAGE_NAME: Final = re.compile(
    "|".join(_LANGUAGE_PATTERNS[name].pattern for name in ("Han", "Japanese", "Hangul")),
    re.IGNORECASE,
)


def cjk_fragments(text: str | None) -> list[str]:
    """The runs of Han, Kana or Hangul letters in ``text``'s prose, glosses left out.

    Prose is the text without code blocks, inline code and URLs (as
    :func:`script_letter_counts`). A run is a maximal span of letters of
    :data:`CJK_SCRIPTS`. A run is a gloss, and left out, when it stands in parentheses
    right after a Latin word (``Tong Sui (糖水)``, ``Kitani Minoru (喜多尼摩留)``), or when
    a CJK language is named within :data:`GLOSS_WINDOW_CHARS` characters of it
    (``"仲裁" (arbitrator) in Chinese``, ``the kanji 愛``).
    """
    if not text:
        return []
    prose = _prose(text)
    fragments: list[str] = []
    start: int | None = None
    for index, char in enumerate(prose + " "):
        if _script_of(char) in CJK_SCRIPTS:
            start = index if start is None else start
            continue
        if start is None:
            continue
        before = prose[max(start - 8, 0) : start]
        after = prose[index : index + 4]
        window = prose[max(start - GLOSS_WINDOW_CHARS, 0) : index + GLOSS_WINDOW_CHARS]
        gloss = _GLOSS_OPEN.search(before) is not None and _GLOSS_CLOSE.match(after) is not None
        if not gloss and _CJK_LANGUAGE_NAME.search(window) is None:
            fragments.append(prose[start:index])
        start = None
    return fragments


def is_cjk_fragment_switch(answer: str | None, prompt: str | None) -> bool:
    """CJK fragments spliced into an English (Latin-script) answer to a Latin prompt.

    Definition: the prompt's dominant script is Latin (≥
    :data:`LANGUAGE_SWITCH_MIN_PROMPT_LETTERS` letters) and it has no Han, Kana or
    Hangul letter; the answer's dominant script is Latin (≥
    :data:`LANGUAGE_SWITCH_MIN_ANSWER_LETTERS` letters); the prompt does not ask for a
    translation or name a CJK language (:func:`asks_for_language`); and the answer has
    at least one :func:`cjk_fragments` run (glosses left out). One character is enough:
    ``two核 secrets``, ``Ursus arctos恭`` are real switches (AlpacaEval, Qwen1.5-72B-Chat
    and Qwen2-72B-Instruct).

    Why a fragment rule beside the dominant-script rule: a decoder that slips into
    Chinese for a word or a clause (``a deeper湛蓝``, ``fluffy,大约2-3分钟。``) leaves the
    answer mostly Latin, so the dominant script never changes. Measured on AlpacaEval
    (``scripts/detector_recall.py``, docs/gate.md "Detectors measured").
    """
    if not answer or not prompt:
        return False
    prompt_counts = script_letter_counts(prompt)
    if any(prompt_counts[script] for script in CJK_SCRIPTS):
        return False
    if dominant_script(prompt_counts, min_letters=LANGUAGE_SWITCH_MIN_PROMPT_LETTERS) != "Latin":
        return False
    answer_counts = script_letter_counts(answer)
    if dominant_script(answer_counts, min_letters=LANGUAGE_SWITCH_MIN_ANSWER_LETTERS) != "Latin":
        return False
    if not any(answer_counts[script] for script in CJK_SCRIPTS):
        return False
    if asks_for_language(prompt, "Han") or asks_for_language(prompt, "Hangul"):
        return False
    return bool(cjk_fragments(answer))


def is_language_switch(answer: str | None, prompt: str | None) -> bool:
    """The answer is written in another script than the prompt, or splices CJK into English.

    Two rules, either fires: the dominant-script rule below, and CJK fragments inside a
    Latin answer to a Latin prompt (:func:`is_cjk_fragment_switch`).

    Dominant-script rule: the dominant script of the answer (:func:`dominant_script` of
    :func:`script_letter_counts`, code blocks, inline code and URLs left out) differs
    from the dominant script of the prompt (the last user message's text), both counted
    only when the answer has ≥ :data:`LANGUAGE_SWITCH_MIN_ANSWER_LETTERS` letters and the
    prompt ≥ :data:`LANGUAGE_SWITCH_MIN_PROMPT_LETTERS` — short answers, code-only
    answers and answers of digits or emoji are never flagged — and the prompt does not
    ask for it (:func:`asks_for_language`: a translation request, or naming a language
    of the answer's script).

    Limitation: scripts only. A switch between two languages of one script (English →
    French, both Latin) is not detected: no language-identification library is installed
    (langdetect, lingua, fastText lid.176 are not dependencies).

    Source: the Unicode Character Database names (UAX #24 script property, approximated
    by the name's first word, which matches it for the letters of the listed scripts).
    """
    if not answer or not prompt:
        return False
    answer_script = dominant_script(
        script_letter_counts(answer), min_letters=LANGUAGE_SWITCH_MIN_ANSWER_LETTERS
    )
    prompt_script = dominant_script(
        script_letter_counts(prompt), min_letters=LANGUAGE_SWITCH_MIN_PROMPT_LETTERS
    )
    if answer_script is None or prompt_script is None or answer_script == prompt_script:
        return is_cjk_fragment_switch(answer, prompt)
    return not asks_for_language(prompt, answer_script)
