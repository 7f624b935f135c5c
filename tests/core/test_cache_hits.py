"""Cache-hit rules: the three tests, the defaults, and settings errors naming the field."""

from __future__ import annotations

import pytest

from shadoweval.cache_hits import mark_cache_hit, matches, matching_headers
from shadoweval.config import DEFAULT_CACHE_HIT_RULES, CacheHitRule, load_settings
from shadoweval.errors import ConfigError
from shadoweval.records import HeaderPair, ResponseRecord


@pytest.mark.parametrize(
    ("rule", "value", "hit"),
    [
        (CacheHitRule(header="x-cache", contains="HIT"), "Hit from cloudfront", True),
        (CacheHitRule(header="x-cache", contains="HIT"), "TCP_MISS", False),
        (CacheHitRule(header="cf-cache-status", equals=("HIT", "STALE")), " stale ", True),
        (CacheHitRule(header="cf-cache-status", equals=("HIT",)), "HIT-ISH", False),
        (CacheHitRule(header="age", greater_than=0), "12", True),
        (CacheHitRule(header="age", greater_than=0), "0", False),
        (CacheHitRule(header="age", greater_than=0), "7, 9", True),
        (CacheHitRule(header="age", greater_than=0), "soon", False),
        (CacheHitRule(header="age", greater_than=0), "nan", False),
        (CacheHitRule(header="age", greater_than=0), "inf", False),
    ],
)
def test_each_test(rule: CacheHitRule, value: str, hit: bool) -> None:
    assert matches(rule, value) is hit


def test_matching_headers_in_header_order_names_lower_case_each_once() -> None:
    headers = [
        ("Age", "5"),
        ("Content-Type", "text/event-stream"),
        ("X-Cache", "HIT"),
        ("X-Cache", "HIT"),
        ("x-cache", "MISS"),
    ]
    assert matching_headers(headers, DEFAULT_CACHE_HIT_RULES) == (
        HeaderPair(name="age", value="5"),
        HeaderPair(name="x-cache", value="HIT"),
    )
    assert matching_headers(headers, ()) == ()


def test_mark_cache_hit_leaves_a_miss_unchanged() -> None:
    miss = ResponseRecord(status_code=200, headers=(HeaderPair(name="age", value="0"),))
    assert mark_cache_hit(miss, DEFAULT_CACHE_HIT_RULES) is miss
    hit = ResponseRecord(status_code=200, headers=(HeaderPair(name="Age", value="3"),))
    marked = mark_cache_hit(hit, DEFAULT_CACHE_HIT_RULES)
    assert marked.cache_hit
    assert marked.cache_hit_headers == (HeaderPair(name="age", value="3"),)


def test_a_record_cannot_claim_a_cache_hit_without_headers() -> None:
    with pytest.raises(ValueError, match="cache_hit is True but cache_hit_headers has 0"):
        ResponseRecord(status_code=200, cache_hit=True)
    with pytest.raises(ValueError, match="cache_hit is False but cache_hit_headers has 1"):
        ResponseRecord(status_code=200, cache_hit_headers=(HeaderPair(name="age", value="1"),))


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        ({"header": "x-cache"}, "needs exactly one of contains, equals, greater_than; got none"),
        (
            {"header": "x-cache", "contains": "hit", "greater_than": 0},
            "got contains, greater_than",
        ),
        ({"header": "x cache", "contains": "hit"}, "is not an HTTP header name"),
        ({"header": "x-cache", "contains": " "}, "contains is empty"),
        ({"header": "x-cache", "equals": []}, "equals is empty"),
        ({"header": "x-cache", "contain": "hit"}, "Extra inputs are not permitted"),
    ],
)
def test_bad_rules_are_refused_naming_the_field(
    monkeypatch: pytest.MonkeyPatch, rule: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        load_settings({"replay": {"cache_hit_rules": [rule]}})
    assert info.value.field is not None
    assert info.value.field.startswith("replay.cache_hit_rules.0")


def test_rules_from_the_environment_are_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "SHADOWEVAL_CAPTURE__CACHE_HIT_RULES",
        '[{"header": "X-Edge-Cache", "equals": ["hit", "stale"]}]',
    )
    monkeypatch.setenv("SHADOWEVAL_REPLAY__CACHE_HIT_RULES", "[]")
    settings = load_settings()
    assert settings.capture.cache_hit_rules == (
        CacheHitRule(header="x-edge-cache", equals=("hit", "stale")),
    )
    assert settings.replay.cache_hit_rules == ()


def test_the_defaults_name_the_usual_caches() -> None:
    described = [rule.describe() for rule in DEFAULT_CACHE_HIT_RULES]
    assert described[0] == "x-cache contains 'hit'"
    assert "age > 0" in described
    names = {rule.header for rule in DEFAULT_CACHE_HIT_RULES}
    assert {"x-cache", "cf-cache-status", "age"} <= names
