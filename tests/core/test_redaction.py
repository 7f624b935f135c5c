"""Secrets never reach a store or a log line: headers, free text, URLs, request targets."""

from __future__ import annotations

import orjson
import pytest

from shadoweval.records import (
    Exchange,
    HeaderPair,
    ModelIdentity,
    RequestRecord,
    ResponseRecord,
)
from shadoweval.redaction import (
    redact_exchange_headers,
    redact_request_target,
    scrub_secrets,
    strip_url_credentials,
)

CANARY = "sk-live-CANARY0123456789abcdef"


def exchange_with_secrets() -> Exchange:
    return Exchange(
        request=RequestRecord(
            body=orjson.dumps({"messages": [{"role": "user", "content": "hi"}]}).decode(),
            headers=(
                HeaderPair(name="authorization", value=f"Bearer {CANARY}"),
                HeaderPair(name="Cookie", value="session=CANARYCOOKIE"),
                HeaderPair(name="x-api-key", value=CANARY),
                HeaderPair(name="content-type", value="application/json"),
            ),
        ),
        response=ResponseRecord(
            status_code=200,
            text="ok",
            headers=(HeaderPair(name="set-cookie", value="id=CANARYCOOKIE"),),
        ),
        baseline_model=ModelIdentity(name="m"),
    )


def test_sensitive_headers_are_removed_and_reported_by_name_only() -> None:
    redacted = redact_exchange_headers(exchange_with_secrets())
    dumped = redacted.model_dump_json()
    assert CANARY not in dumped
    assert "CANARYCOOKIE" not in dumped
    assert [h.name for h in redacted.request.headers] == ["content-type"]
    assert redacted.redaction.headers_removed == (
        "authorization",
        "cookie",
        "set-cookie",
        "x-api-key",
    )


def test_nothing_to_remove_returns_the_same_record() -> None:
    ex = exchange_with_secrets()
    clean = redact_exchange_headers(ex)
    assert redact_exchange_headers(clean) is clean


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        (f'{{"name": "authorization", "value": "Bearer {CANARY}"}}', "sensitive_header"),
        (f'{{"X-Api-Key": "{CANARY}"}}', "sensitive_header"),
        (f"curl -H 'Authorization: Bearer {CANARY}'", "bearer_token"),
        (f"my key is {CANARY}.", "api_key"),
        ("sk-ant-api03-ABCDEFGHIJKLMNOPQRST", "api_key"),
        ("AKIAABCDEFGHIJKLMNOP", "aws_access_key_id"),
        ("ghp_" + "a" * 36, "github_token"),
        ("xoxb-1234567890-abcdefghij", "slack_token"),
        ("sk_live_51HqLyjWDarjtT1zdp7dcXXXXXXXXXXXX", "stripe_key"),
        ("rk_live_4eC39HqLyjWDarjtT1zdp7dc", "stripe_key"),
        ("AIzaSyDaGmWKa4JsXZ-HjGw7ISLn_3namBGewQe", "google_api_key"),
        ("hf_abcdefghijklmnopqrstuvwxyzABCDEFGH", "huggingface_token"),
        ("glpat-xxxxxxxxxxxxxxxxxxxx", "gitlab_token"),
    ],
)
def test_secret_patterns_in_free_text_are_scrubbed(text: str, rule: str) -> None:
    scrubbed, hits = scrub_secrets(text)
    assert CANARY not in scrubbed
    assert f"[REDACTED:{rule}]" in scrubbed
    assert rule in {h.rule for h in hits}
    assert all(h.count >= 1 for h in hits)


def test_ordinary_text_is_untouched() -> None:
    text = (
        'The sky is blue; {"name": "content-type", "value": "application/json"} skill-set; '
        "use the hf_ prefix; the AIza prefix; task_live_data; glpat- tokens"
    )
    assert scrub_secrets(text) == (text, ())


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://user:HTTPSECRET@host:8080/v1?a=1", "http://host:8080/v1?a=1"),
        ("https://token@host/path", "https://host/path"),
        ("http://127.0.0.1:9000", "http://127.0.0.1:9000"),
    ],
)
def test_url_credentials_are_stripped(url: str, expected: str) -> None:
    assert strip_url_credentials(url) == expected


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("/v1/runs?token=abc&limit=5", "/v1/runs?token=[REDACTED]&limit=5"),
        ("/v1/runs?access_token=abc", "/v1/runs?access_token=[REDACTED]"),
        ("/v1/runs?API_KEY=abc", "/v1/runs?API_KEY=[REDACTED]"),
        (
            "/v1/runs?x-api-key=abc&api%5Fkey=d",
            "/v1/runs?x-api-key=[REDACTED]&api%5Fkey=[REDACTED]",
        ),
        (
            "/v1/runs?refresh_token=a&client_secret=b",
            "/v1/runs?refresh_token=[REDACTED]&client_secret=[REDACTED]",
        ),
        (
            "/v1/runs?q=sk-proj-abcdefghijklmnopqrst",
            "/v1/runs?q=[REDACTED]",
        ),  # a key under any name
        ("/v1/runs/sk-abcdefghijklmnopqrst/verdict", "/v1/runs/[REDACTED:api_key]/verdict"),
        ("/v1/runs?bearer=QLEAK10&jwt=x", "/v1/runs?bearer=[REDACTED]&jwt=[REDACTED]"),
        ("/v1/runs?status=held&limit=3", "/v1/runs?status=held&limit=3"),
        ("/v1/runs?token&token=", "/v1/runs?token&token="),  # nothing to hide
        ("/v1/runs", "/v1/runs"),
    ],
)
def test_request_targets_lose_credentials_before_a_log_line(target: str, expected: str) -> None:
    assert redact_request_target(target) == expected
