"""Directional harm detectors: yes/no facts about one side's answer, and tool changes.

Divergence says *how much* an answer changed; these detectors say whether one side shows
a known failure. Each is a pure function of one side (the gate pairs them: harm is the
candidate showing it where the baseline did not, more often than the reverse,
:mod:`shadoweval.stats.checks.harms`). :func:`side_harms` runs all of them for one side and
returns the :class:`~shadoweval.records.HarmKind` values that fired, in declaration
order; :func:`tool_changes` compares both sides' tool calls. Pure: no I/O, no clock.

Which text each detector reads: template markers read the side text (content plus one
line per tool call, :func:`shadoweval.compare.pair.side_text`), as :attr:`PairScore.template_leaks`
does; degeneration, refusal, language switch and placeholder JSON read the content text
only — tool-call arguments are data, and data repeats by design (BFCL
``parallel_multiple_function_179`` passes a 52-card deck, which deflates like a loop).

Measured on the real files in ``../shared/data`` (pinned by
``tests/compare/test_harms_real.py``): degeneration
flags 37 of 805 Llama-3.1-8B-Instruct-Turbo AlpacaEval answers (every one a loop, read
by eye), 0 of 805 Llama-3-8B, 1 of 805 Qwen1.5-72B (a real CJK loop), 0 of 805
Qwen2-72B and 1 of 640 MT-Bench answers (a Vicuna-13B answer looping in its code).
"""

from __future__ import annotations

import re
import unicodedata
import zlib
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Final

from shadoweval.compare.formats import extract_json, strip_json_fence
from shadoweval.compare.json_parse import canonical_json, parse_json
from shadoweval.compare.leakage import template_leaks
from shadoweval.errors import ConfigError
from shadoweval.records import FinishReason, HarmKind, ResponseRecord, ToolCall, ToolChange
from shadoweval.text import is_blank

__all__ = [
    "DEFAULT_REFUSAL_PATTERNS",
    "DEGENERATION_MIN_CHARS",
    "DEGENERATION_RATIO_MIN",
    "DEGENERATION_WINDOWS_CHARS",
    "LANGUAGE_SWITCH_MIN_ANSWER_LETTERS",
    "LANGUAGE_SWITCH_MIN_PROMPT_LETTERS",
    "REFUSAL_WINDOW_CHARS",
    "RefusalPatterns",
    "SideContext",
    "asks_for_language",
    "compile_refusal_patterns",
    "dominant_script",
    "has_template_markers",
    "is_degenerate",
    "is_language_switch",
    "is_missing_finish_reason",
    "is_placeholder_json",
    "is_refusal",
    "is_runaway_length",
    "normalised_arguments",
    "script_letter_counts",
    "side_harms",
    "tool_changes",
    "window_compression_ratio",
]

# ------------------------------------------------------------------- degeneration

DEGENERATION_WINDOWS_CHARS: Final[tuple[int, ...]] = (512, 1024)
"""Window sizes (characters) scanned for a repetition loop; each slides by a quarter of
its size and the last window of each size ends at the end of the text."""
DEGENERATION_RATIO_MIN: Final = 6.0
"""A window whose UTF-8 bytes deflate to at most 1/6 of their size is a loop."""
DEGENERATION_MIN_CHARS: Final = 256
"""Answers shorter than this are never called degenerate (``Write "Test"`` → ``**TEST**``)."""


def window_compression_ratio(text: str) -> float:
    """The highest deflate compression ratio over the text's sliding windows.

    For each size W in :data:`DEGENERATION_WINDOWS_CHARS` the text is cut into windows of
    W characters starting every W/4 characters (plus one window ending at the last
    character); a text shorter than W is one window. The ratio of a window is
    ``len(utf8) / len(zlib.compress(utf8, 9))`` — how many times deflate (LZ77 + Huffman)
    shrinks it. Returns the maximum over all windows, ``0.0`` for a text shorter than
    :data:`DEGENERATION_MIN_CHARS`.

    Cost: about ``len(text) / 64`` deflate calls on ≤ 4 KiB each (a 15k-character answer
    takes a few milliseconds).
    """
    if len(text) < DEGENERATION_MIN_CHARS:
        return 0.0
    best = 0.0
    for size in DEGENERATION_WINDOWS_CHARS:
        step = size // 4
        last = max(len(text) - size, 0)
        starts = list(range(0, last + 1, step))
        if starts[-1] != last:
            starts.append(last)
        for start in starts:
            raw = text[start : start + size].encode("utf-8")
            best = max(best, len(raw) / len(zlib.compress(raw, 9)))
    return best


def is_degenerate(text: str | None) -> bool:
    """The answer contains a repetition loop (a degeneration of the decoder).

    Definition: some window of 512 or 1024 characters of the answer deflates to at most
    1/6 of its UTF-8 size (:func:`window_compression_ratio` ≥
    :data:`DEGENERATION_RATIO_MIN`); answers under :data:`DEGENERATION_MIN_CHARS`
    characters are never flagged.

    Why compression and not word n-grams: the loops in real outputs are word loops
    (``one by one by one``, ``#. #. #.``), line loops (``**No-Ob Career Path:**``
    repeated for 10k characters), but also loops with no word boundary at all
    (``NTENTENTENT``, ``\\t\\t\\t``, ``=#=#=#``, ``暴风雪礼赞暴风雪礼赞``); a word n-gram
    measure such as seq-rep-n misses the last kind and fires on dotted tables of
    contents. Deflate finds any repeated substring within its 32 KiB window, whatever
    the script. A window (not the whole answer) is scored because loops usually take
    over the tail of an otherwise normal answer; two sizes catch short loops (a 600
    character ``a a a a``) and loops with a long period (a repeated 250-character YAML
    block).

    Threshold, measured on ``../shared/data`` (4 AlpacaEval files, 3,220 answers, and
    640 MT-Bench answers): normal answers — essays, markdown tables, code, numbered
    lists — peak at a ratio of 5.0; every answer at 6 or more is a loop (37 of 805
    Llama-3.1-8B-Instruct-Turbo answers, all ≥ 6.7; one Qwen1.5-72B answer, 62.7; one
    Vicuna-13B answer looping in its code, 9.8).

    Sources: Holtzman et al. 2020, "The Curious Case of Neural Text Degeneration"
    (ICLR; repetition loops of likelihood decoding); Welleck et al. 2020, "Neural Text
    Generation with Unlikelihood Training" (ICLR; seq-rep-n, the share of repeated
    n-grams, the word-level form of the same measure); Radford et al. 2022, "Robust
    Speech Recognition via Large-Scale Weak Supervision" (Whisper: a gzip compression
    ratio above 2.4 marks a repetitive, failed decoding of a 30 s segment).
    """
    return window_compression_ratio(text or "") >= DEGENERATION_RATIO_MIN


# ------------------------------------------------------------------- runaway length


def is_runaway_length(response: ResponseRecord, max_tokens: int | None) -> bool:
    """The answer was cut by its token budget.

    True when ``finish_reason`` is ``length`` (any server's spelling, normalised), or the
    side reported ``usage.completion_tokens`` ≥ ``max_tokens`` (the request's
    ``max_completion_tokens``, else ``max_tokens``; ``None`` when it set neither). The
    gate adds the length-ratio bound of ``harm.length_ratio_max`` from ``output_chars``
    (:mod:`shadoweval.stats.frame`): that part needs both sides, this one does not.

    Source: the OpenAI chat-completions reference (``finish_reason: "length"`` — "the
    maximum number of tokens specified in the request was reached").
    """
    if response.finish_reason is FinishReason.LENGTH:
        return True
    tokens = response.usage.completion_tokens
    return max_tokens is not None and tokens is not None and tokens >= max_tokens


# ------------------------------------------------------------------- refusal

REFUSAL_WINDOW_CHARS: Final = 300
"""Refusal patterns are searched in the first 300 characters of the answer only."""

DEFAULT_REFUSAL_PATTERNS: Final[tuple[str, ...]] = (
    # "I can't help with that", "I cannot assist", "I'm unable to provide", "I won't write"
    r"\bI(?:\s+can['’]?t|\s+cannot|\s+can\s+not|\s+won['’]t|\s+will\s+not|['’]m\s+unable\s+to"
    r"|\s+am\s+unable\s+to|['’]m\s+not\s+able\s+to|\s+am\s+not\s+able\s+to)"
    r"\s+(?:help|assist|provide|comply|fulfil|fulfill|support|create|generate|write|produce"
    r"|answer|engage|participate|do\s+that|share|give)\b",
    # "I'm sorry, but I can't", "I apologize, but I cannot" (up to 40 characters between)
    r"\b(?:I['’]m\s+(?:really\s+|very\s+)?sorry|I\s+am\s+(?:really\s+|very\s+)?sorry"
    r"|I\s+apologi[sz]e|My\s+apologies),?\s+but\s+[^.!?\n]{0,40}?"
    r"\b(?:can['’]?t|cannot|can\s+not|won['’]t|will\s+not|unable|not\s+able"
    r"|not\s+comfortable|not\s+appropriate|not\s+possible)\b",
    # "As an AI language model, …": a deflection before or instead of the answer
    r"\bAs\s+an\s+AI\s+(?:language\s+model|assistant|model|developed\s+by)\b",
    r"\bAs\s+an\s+AI,\s+I\s+(?:can['’]?t|cannot|don['’]t|do\s+not|am\s+not)\b",
    # "I must decline", "I have to respectfully refuse"
    r"\bI\s+(?:must|have\s+to|need\s+to)\s+(?:respectfully\s+)?(?:decline|refuse)\b",
    # "I'm not comfortable writing", "I don't feel comfortable with"
    r"\b(?:I['’]m\s+not|I\s+am\s+not|I\s+(?:do\s+not|don['’]t)\s+feel)\s+comfortable"
    r"\s+(?:with|providing|writing|creating|helping|generating|sharing|answering)\b",
    # "It is not appropriate for me to", "That's not something I can help with"
    r"\b(?:it|that)(?:['’]s|\s+is|\s+would\s+be)\s+not\s+(?:appropriate|ethical)"
    r"\s+for\s+me\s+to\b",
    r"\b(?:it|that)(?:['’]s|\s+is)\s+not\s+something\s+I\s+(?:can|am\s+able\s+to)"
    r"\s+(?:help|assist|do|provide)\b",
    # "I'm not allowed / permitted to"
    r"\bI(?:['’]m|\s+am)\s+not\s+(?:allowed|permitted|authori[sz]ed)\s+to\b",
)
"""The default refusal pattern set: case-insensitive regular expressions, searched in the
first :data:`REFUSAL_WINDOW_CHARS` characters of the answer.

Modelled on the refusal prefixes used to score jailbreak attempts by string matching
(Zou et al. 2023, "Universal and Transferable Adversarial Attacks on Aligned Language
Models", the ``test_prefixes`` of llm-attacks: "I'm sorry", "I apologize", "As an AI",
"I cannot", "I can't assist", "I'm not able to provide" …), narrowed so a bare "Sorry"
or "I cannot" in an ordinary answer ("I cannot stress enough …") does not match: each
pattern needs a refusal verb or the AI-deflection phrase. Configure with
``compare.refusal_patterns`` (``SHADOWEVAL_COMPARE__REFUSAL_PATTERNS``, a JSON list)."""


@dataclass(frozen=True, slots=True)
class RefusalPatterns:
    """A compiled refusal pattern set (:func:`compile_refusal_patterns`).

    ``patterns`` are the sources as given; ``compiled`` the same, compiled
    case-insensitively, in the same order.
    """

    patterns: tuple[str, ...]
    compiled: tuple[re.Pattern[str], ...]


@lru_cache(maxsize=32)
def _compile_patterns(patterns: tuple[str, ...]) -> RefusalPatterns:
    compiled: list[re.Pattern[str]] = []
    for pattern in patterns:
        if not pattern.strip():
            raise ConfigError(
                "compare.refusal_patterns: a pattern is blank; it would match every answer",
                field="compare.refusal_patterns",
                value=pattern,
            )
        try:
            regex = re.compile(pattern, re.IGNORECASE)
        except re.error as exc:
            raise ConfigError(
                f"compare.refusal_patterns: {pattern!r} is not a valid regular expression: {exc}",
                field="compare.refusal_patterns",
                value=pattern,
            ) from None
        if regex.search("") is not None:
            raise ConfigError(
                f"compare.refusal_patterns: {pattern!r} matches the empty text, so it would "
                "flag every answer",
                field="compare.refusal_patterns",
                value=pattern,
            )
        compiled.append(regex)
    return RefusalPatterns(patterns=patterns, compiled=tuple(compiled))


def compile_refusal_patterns(patterns: Iterable[str] | None = None) -> RefusalPatterns:
    """Compile a refusal pattern set (``None``: :data:`DEFAULT_REFUSAL_PATTERNS`).

    Patterns are Python regular expressions, compiled with ``re.IGNORECASE``. An empty
    set is allowed (the detector then never fires). Compiled sets are cached.

    Raises:
        ConfigError: a pattern is blank, is not a valid regular expression, or matches
            the empty text; the message names the pattern (``field`` is
            ``compare.refusal_patterns``, ``value`` the pattern).
    """
    return _compile_patterns(DEFAULT_REFUSAL_PATTERNS if patterns is None else tuple(patterns))


def is_refusal(text: str | None, patterns: RefusalPatterns) -> bool:
    """The answer refuses or deflects: a refusal pattern matches near its start.

    Definition: any pattern of ``patterns`` is found (``re.search``) in the first
    :data:`REFUSAL_WINDOW_CHARS` characters of the content text after leading
    whitespace. Only the start is read, so an answer that *mentions* refusing later
    ("… the assistant should say 'I can't help with that'") is not flagged; an answer
    that opens with a refusal and then helps anyway ("As an AI language model I have no
    opinions, but …") is — it deflected. Limitation: pattern matching sees English
    phrasings only; a refusal in another language is not detected.

    Source: string-matched refusal prefixes (Zou et al. 2023, see
    :data:`DEFAULT_REFUSAL_PATTERNS`).
    """
    if not text:
        return False
    head = text.lstrip()[:REFUSAL_WINDOW_CHARS]
    return any(regex.search(head) is not None for regex in patterns.compiled)


# ------------------------------------------------------------------- finish reason


def is_missing_finish_reason(response: ResponseRecord) -> bool:
    """The answer ended without any ``finish_reason`` (``finish_reason_raw is None``).

    A server that finished sends one on the last choice (OpenAI reference); a stream that
    ends without it was cut (a dropped connection, a proxy timeout, a server crash mid
    stream). Only called for a side that answered without error; the caller leaves out
    imported baselines, whose tables record no finish reason for any row.
    """
    return response.finish_reason_raw is None


# ------------------------------------------------------------------- template markers


def has_template_markers(text: str | None) -> bool:
    """Chat-template markers leaked into the answer
    (:func:`shadoweval.compare.leakage.template_leaks`).

    Definition and sources in :mod:`shadoweval.compare.leakage` (exact, case-sensitive special
    tokens of ChatML, Llama 2/3/4, Mistral, Gemma, Zephyr, Phi, Command-R, DeepSeek).
    """
    return bool(template_leaks(text))


# ------------------------------------------------------------------- language switch

LANGUAGE_SWITCH_MIN_ANSWER_LETTERS: Final = 40
"""An answer with fewer letters (outside code and URLs) is never called a switch."""
LANGUAGE_SWITCH_MIN_PROMPT_LETTERS: Final = 12
"""A prompt with fewer letters has no reliable script."""
_KANA_SHARE_JAPANESE: Final = 0.1

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


def is_language_switch(answer: str | None, prompt: str | None) -> bool:
    """The answer is written in another script than the prompt.

    Definition: the dominant script of the answer (:func:`dominant_script` of
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
        return False
    return not asks_for_language(prompt, answer_script)


# ------------------------------------------------------------------- placeholder JSON


def _best_json(text: str) -> tuple[bool, Any]:
    strict = parse_json(text)
    if strict.ok:
        return True, strict.value
    body = strip_json_fence(text)
    if body is not None:
        fenced = parse_json(body)
        if fenced.ok:
            return True, fenced.value
    found = extract_json(text)
    return (True, found) if found is not None else (False, None)


def _is_empty(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, str):
        return is_blank(value)
    if isinstance(value, list):
        return all(_is_empty(item) for item in value)
    if isinstance(value, dict):
        return all(_is_empty(item) for item in value.values())
    return False


def _missing_required(value: Any, schema: Any, depth: int = 0) -> bool:
    if depth > 32 or not isinstance(schema, dict):
        return False
    if isinstance(value, dict):
        required = schema.get("required")
        if isinstance(required, list) and any(
            isinstance(key, str) and key not in value for key in required
        ):
            return True
        properties = schema.get("properties")
        if isinstance(properties, dict):
            return any(
                _missing_required(value[key], sub, depth + 1)
                for key, sub in properties.items()
                if key in value
            )
        return False
    if isinstance(value, list):
        items = schema.get("items")
        return any(_missing_required(item, items, depth + 1) for item in value)
    return False


def is_placeholder_json(text: str | None, schema: dict[str, Any] | None) -> bool:
    """Valid JSON that says nothing, where JSON was asked for.

    Only called where JSON was expected (``response_format`` ``json_object`` /
    ``json_schema``, or a structured task type). The content is parsed as
    :func:`shadoweval.compare.formats.json_format_flags` does (strict, else one fenced block, else
    the first JSON container in the text). Placeholder when it parses and either

    * the value is empty: ``{}``, ``[]``, or a container whose every value is empty
      (``null``, a blank string, or an empty container, recursively) —
      ``{"name": "", "items": []}``; or
    * it misses a field the schema requires: an object lacks a key of its schema
      node's ``required``, following ``properties`` and ``items`` (not ``$ref``,
      ``anyOf`` or ``allOf``).

    Text that does not parse is not a placeholder (the format checks count it); nor is
    a JSON scalar (``42``, ``false``: a value).

    Source: the failure seen on a real llama.cpp server with the wrong chat template —
    JSON mode answered ``{}``, which parses, so the format-parse failure rate *fell*
    (issue 11); OpenAI structured outputs document ``required`` as the fields every
    answer must contain.
    """
    if is_blank(text):
        return False
    assert text is not None
    parsed, value = _best_json(text)
    if not parsed or not isinstance(value, dict | list):
        return False
    if _is_empty(value):
        return True
    return schema is not None and _missing_required(value, schema)


# ------------------------------------------------------------------- all detectors


@dataclass(frozen=True, slots=True)
class SideContext:
    """What the detectors need from the request, the same for both sides.

    ``prompt``: the last user message's text (``None`` when unreadable);
    ``max_tokens``: the request's ``max_completion_tokens`` else ``max_tokens``;
    ``json_expected``: JSON was asked for (or the task type is structured), with the
    ``schema`` when one was given; ``refusal``: the compiled refusal patterns.
    """

    prompt: str | None = None
    max_tokens: int | None = None
    json_expected: bool = False
    schema: dict[str, Any] | None = None
    refusal: RefusalPatterns = field(default_factory=lambda: compile_refusal_patterns())


def side_harms(
    response: ResponseRecord,
    *,
    text: str,
    context: SideContext,
    check_finish_reason: bool = True,
) -> tuple[HarmKind, ...]:
    """Every harm detector that fires on one side's answer, in :class:`HarmKind` order.

    Args:
        response: the side's response (the caller passes only a side that answered
            without error: an errored side has no harms).
        text: the side text (:func:`shadoweval.compare.pair.side_text` of ``response``), read by
            the template-marker detector; the others read ``response.text``.
        context: the request's prompt, token budget, JSON expectation and the refusal
            patterns.
        check_finish_reason: ``False`` for a side whose record cannot carry a finish
            reason (an imported baseline).

    Returns:
        The fired :class:`~shadoweval.records.HarmKind` values, unique, in declaration
        order. Never raises.
    """
    content = response.text or ""
    fired = {
        HarmKind.DEGENERATION: is_degenerate(content),
        HarmKind.RUNAWAY_LENGTH: is_runaway_length(response, context.max_tokens),
        HarmKind.REFUSAL: is_refusal(content, context.refusal),
        HarmKind.MISSING_FINISH_REASON: check_finish_reason and is_missing_finish_reason(response),
        HarmKind.TEMPLATE_MARKERS: has_template_markers(text),
        HarmKind.LANGUAGE_SWITCH: is_language_switch(content, context.prompt),
        HarmKind.PLACEHOLDER_JSON: context.json_expected
        and is_placeholder_json(content, context.schema),
    }
    return tuple(kind for kind in HarmKind if fired[kind])


# ------------------------------------------------------------------- tool changes


def _json_number_normalised(value: Any) -> Any:
    if isinstance(value, bool) or value is None or isinstance(value, str | int):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() else value
    if isinstance(value, list):
        return [_json_number_normalised(item) for item in value]
    if isinstance(value, dict):
        return {key: _json_number_normalised(item) for key, item in value.items()}
    return value


def normalised_arguments(arguments: str) -> str:
    """A tool call's arguments in canonical form: equal forms mean equal arguments.

    Arguments that parse as JSON become canonical JSON (sorted keys, no whitespace,
    :func:`shadoweval.compare.json_parse.canonical_json`) with integral numbers written as integers
    (JSON has one number type: ``1`` and ``1.0`` are the same value). Arguments that do
    not parse are compared as their text with surrounding whitespace stripped.
    """
    parsed = parse_json(arguments)
    if not parsed.ok:
        return arguments.strip()
    return canonical_json(_json_number_normalised(parsed.value))


def tool_changes(
    baseline_calls: Sequence[ToolCall],
    candidate_calls: Sequence[ToolCall],
    *,
    order_free: bool = False,
) -> tuple[ToolChange, ...]:
    """How the candidate's tool calls differ from the baseline's, at most one change.

    Calls are taken in ``index`` order; a call is its name and its
    :func:`normalised_arguments`. The first rule that applies decides:

    * ``text_instead_of_call`` — the baseline called, the candidate made no call;
    * ``call_instead_of_text`` — the baseline made no call, the candidate called;
    * ``function_changed`` — both called, the multisets of function names differ
      (another function, or a different number of calls);
    * ``arguments_changed`` — the same names, but the multisets of (name, arguments)
      differ: some call's arguments changed after normalisation (key order, whitespace
      and ``1`` vs ``1.0`` never count);
    * ``order_changed`` — the same calls with the same arguments in another order;
      never with ``order_free=True``.

    No change (or no calls on either side) gives ``()``. The caller applies this only
    where the request offered tools and neither side errored. The compare stage calls
    it with ``order_free=False`` always, so the stored pair says an order difference
    happened; the policy's ``tool_calls.order_free`` decides at gate time whether it
    counts as a change.
    """
    base = sorted(baseline_calls, key=lambda call: call.index)
    cand = sorted(candidate_calls, key=lambda call: call.index)
    if not base and not cand:
        return ()
    if base and not cand:
        return (ToolChange.TEXT_INSTEAD_OF_CALL,)
    if cand and not base:
        return (ToolChange.CALL_INSTEAD_OF_TEXT,)
    if Counter(call.name for call in base) != Counter(call.name for call in cand):
        return (ToolChange.FUNCTION_CHANGED,)
    base_keys = [(call.name, normalised_arguments(call.arguments)) for call in base]
    cand_keys = [(call.name, normalised_arguments(call.arguments)) for call in cand]
    if Counter(base_keys) != Counter(cand_keys):
        return (ToolChange.ARGUMENTS_CHANGED,)
    if base_keys != cand_keys and not order_free:
        return (ToolChange.ORDER_CHANGED,)
    return ()
