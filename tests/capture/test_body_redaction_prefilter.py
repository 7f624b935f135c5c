"""The body redactor's prefilter (one check per text for every rule's ``needs``) gives the
same text and the same hits as applying each rule in turn with its own check."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shadoweval.body_prefilter import Prefilter
from shadoweval.body_redaction import BodyRedactor, BodyRule, RedactionHits, _apply
from shadoweval.config import BodyRedactionSettings
from shadoweval.records import RedactionHit

WORDS = st.sampled_from(
    [
        "jane.doe@example.com",
        "a@b",
        "@",
        "+",
        "+1 555 123 4567",
        "(555) 123-4567",
        "020 7946 0958",
        "06 12 34 56 78",
        "4111 1111 1111 1111",
        "4111111111111112",
        "١٢٣٤٥٦٧٨٩٠١٢٣",
        "Bearer abcdefgh12345",
        "BEARER",
        "sk-abcdefghijklmnop1234",
        "sk-",
        "AKIAABCDEFGHIJKLMNOP",
        "ghp_" + "a" * 36,
        "xoxb-1234567890-abc",
        "sk_live_" + "b" * 20,
        "AIza" + "c" * 35,
        "hf_" + "d" * 34,
        "glpat-" + "e" * 22,
        '"password": "hunter2"',
        '\\"api_key\\": \\"zzz\\"',
        '"authorization": "x y"',
        '{"name": "x-api-key", "value": "v"}',
        "[REDACTED:email]",
        "[",
        "]",
        '"',
        "7",
        " ",
        "\n",
        "tok",
        "İ",
        "\u212a",
        "Σ",
        "日本語",
    ]
)
TEXTS = st.one_of(st.lists(WORDS, max_size=12).map("".join), st.text(max_size=40))

SETTINGS = [
    BodyRedactionSettings(),
    BodyRedactionSettings(rules=("secret_key",)),
    BodyRedactionSettings(rules=("email", "phone"), extra_patterns={"a+b@c": r"tok\d?"}),
    BodyRedactionSettings(rules=("card_number", "secret_field"), extra_patterns={"d1": "hf_"}),
]
REDACTORS = [BodyRedactor(s) for s in SETTINGS]


def each_rule(rules: tuple[BodyRule, ...], text: str) -> tuple[str, tuple[RedactionHit, ...]]:
    """The reference: every rule in order, each with its own ``needs`` check."""
    hits = RedactionHits()
    for rule in rules:
        text, n = _apply(rule, text)
        if n:
            hits.add(rule.name, "x", n)
    return text, hits.to_hits()


@settings(max_examples=1500, deadline=None)
@given(TEXTS, st.sampled_from(range(len(REDACTORS))), st.booleans())
def test_prefilter_gives_the_text_and_hits_of_each_rule(
    text: str, which: int, secrets_only: bool
) -> None:
    redactor = REDACTORS[which]
    hits = RedactionHits()
    out = redactor.redact_text(text, "x", hits, secrets_only=secrets_only)
    rules = redactor.secret_rules if secrets_only else redactor.rules
    assert (out, hits.to_hits()) == each_rule(rules, text)


# Rules whose tokens could make a later rule's needle: "[REDACTED:x@y]" holds "@", and
# "[REDACTED:n1]" a digit. The prefilter must not skip the later rules on the original text.
TRICKY = (
    BodyRule("x@y", re.compile("zz")),
    BodyRule("email", re.compile(r"(?i)X@Y"), needs=("x@y",), needs_lower=True),
    BodyRule("n1", re.compile("qq")),
    BodyRule("digits", re.compile(r"1\]"), needs_digit=True),
    BodyRule("bracket", re.compile(r"\]\["), needs=("][",)),
)


@pytest.mark.parametrize("text", ["zz", "qq", "zzqq", "qqzz", "none", "zz qq 5"])
def test_prefilter_keeps_rules_an_earlier_token_can_feed(text: str) -> None:
    kept = Prefilter(TRICKY).rules_for(text)
    hits = RedactionHits()
    out = text
    for rule in kept:
        out, n = _apply(rule, out)
        if n:
            hits.add(rule.name, "x", n)
    assert (out, hits.to_hits()) == each_rule(TRICKY, text)
    assert [r.name for r in kept] == [r.name for r in TRICKY]  # nothing may be skipped


def test_prefilter_skips_rules_without_their_needle() -> None:
    redactor = BodyRedactor(BodyRedactionSettings())
    assert redactor._prefilter.rules_for("hello there") == ()
    assert {r.name for r in redactor._prefilter.rules_for("call 555")} == {"card_number", "phone"}
    assert len(redactor._prefilter.rules_for('say "hi" at 5')) == len(redactor.rules)
