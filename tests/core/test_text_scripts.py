"""Script detection of answers (:func:`shadoweval.text.dominant_script`, issue 14)."""

from __future__ import annotations

import pytest

from shadoweval.text import SCRIPT_MIN_LETTERS, dominant_script, script_letter_counts


@pytest.mark.parametrize(
    ("text", "script"),
    [
        ("The quick brown fox jumps over the lazy dog, again and again.", "Latin"),
        ("Le cœur a ses raisons que la raison ne connaît point, dit Pascal.", "Latin"),
        ("量子计算利用量子比特的叠加和纠缠来并行处理信息，在某些问题上更快。", "Han"),
        ("こんにちは、これはにほんごのテストぶんしょうです。カタカナもすこし。", "Kana"),
        ("안녕하세요 이것은 한국어 테스트 문장입니다 정말로요", "Hangul"),
        ("Привет, как дела? Это тестовое сообщение на русском языке.", "Cyrillic"),
        ("مرحبا هذه رسالة اختبار باللغة العربية للتأكد", "Arabic"),
        ("Ελληνικά κείμενο για δοκιμή της ανίχνευσης γραφής", "Greek"),
        ("שלום עולם זהו משפט בדיקה בעברית לזיהוי הכתב", "Hebrew"),
        ("สวัสดีครับ นี่คือประโยคทดสอบภาษาไทยสำหรับการตรวจจับ", "Thai"),
        ("ＡＢＣＤＥＦＧＨＩＪＫＬＭＮＯＰＱＲＳＴＵ full-width Latin", "Latin"),
    ],
)
def test_the_script_of_most_letters_is_named(text: str, script: str) -> None:
    assert dominant_script(text) == script


def test_too_few_letters_is_unknown_not_a_guess() -> None:
    assert dominant_script(None) is None
    assert dominant_script("") is None
    assert dominant_script("42") is None
    assert dominant_script('{"a": 1, "b": [2, 3]} 😀 ✅ …') is None
    assert dominant_script("是") is None  # one character: too little to tell
    assert dominant_script("a" * SCRIPT_MIN_LETTERS) == "Latin"
    assert dominant_script("a" * (SCRIPT_MIN_LETTERS - 1) + " 123") is None


def test_a_mixed_answer_is_named_by_its_majority_and_counts_are_kept() -> None:
    text = "这是一个关于 Python 编程语言的回答，讲解了列表推导式和生成器的区别与用法。"
    counts = script_letter_counts(text)
    assert list(counts) == ["Han", "Latin"]
    assert counts["Latin"] == len("Python")
    assert dominant_script(text) == "Han"
    code = "def f(x):\n    return x + 1  # 返回加一后的值\n" * 3
    assert dominant_script(code) == "Latin"  # identifiers outnumber the comment
