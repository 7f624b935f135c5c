"""Body rules: what they catch, what they must leave alone, and where they report hits."""

from __future__ import annotations

import time

import orjson
import pytest

from shadoweval.body_redaction import BodyRedactor, RedactionHits, SecretFieldMatcher, luhn_valid
from shadoweval.config import BodyRedactionSettings
from shadoweval.errors import ConfigError

CANARY_EMAIL = "jane.doe@example.com"
CANARY_KEY = "sk-canary-0123456789abcdef"


@pytest.fixture
def redactor() -> BodyRedactor:
    return BodyRedactor(BodyRedactionSettings())


def redact(redactor: BodyRedactor, text: str) -> tuple[str, dict[str, int]]:
    hits = RedactionHits()
    out = redactor.redact_text(text, "x", hits)
    return out, hits.by_rule()


@pytest.mark.parametrize(
    "text",
    [
        CANARY_EMAIL,
        "mail a.b+tag@sub.example.co.uk, thanks",
        "<JANE_DOE-1@Example.ORG>",
    ],
)
def test_email_true_positives(redactor: BodyRedactor, text: str) -> None:
    out, rules = redact(redactor, text)
    assert rules == {"email": 1}
    assert "@" not in out
    assert "[REDACTED:email]" in out


@pytest.mark.parametrize("text", ["user@localhost", "a @ b", "@handle", "x@y", "name@.com"])
def test_email_false_positives_avoided(redactor: BodyRedactor, text: str) -> None:
    assert redact(redactor, text) == (text, {})


@pytest.mark.parametrize(
    "text",
    [
        "+14155552671",  # E.164 canonical
        "+1 (415) 555-2671",
        "+44 20 7946 0958",
        "+33 6 12 34 56 78",
        "(555) 123-4567",
        "555-123-4567",
        "555.123.4567",
        "555 123 4567",
        "1-800-555-1234",
        "020 7946 0958",
        "06 12 34 56 78",
    ],
)
def test_phone_true_positives(redactor: BodyRedactor, text: str) -> None:
    out, rules = redact(redactor, f"call {text} today")
    assert rules == {"phone": 1}, out
    assert out == "call [REDACTED:phone] today"


@pytest.mark.parametrize(
    "text",
    [
        "in 2024 we shipped 1200 units",  # years, counts
        "order id 5551234567",  # a bare digit run: never a phone (documented trade-off)
        "released 2024-05-13 at 10:30",  # dates and times
        "host 192.168.100.200",  # IP address
        "version 1.2.3-4",
        "pi is 3.14159265358979",
        "price 1 000 000 EUR",
        "ISBN 978-0-306-40615-7",
        "SSN-like 123-45-6789",
        "4111 1111 1111 1112",  # card-shaped, fails Luhn: neither card nor phone
        "call_12345678901",  # an id glued to a word
    ],
)
def test_phone_false_positives_avoided(redactor: BodyRedactor, text: str) -> None:
    assert redact(redactor, text) == (text, {})


@pytest.mark.parametrize(
    "number",
    [
        "4111 1111 1111 1111",
        "4111-1111-1111-1111",
        "4111111111111111",
        "5500 0000 0000 0004",
        "3782 822463 10005",  # Amex, 15 digits in 4-6-5
        "6011000990139424",
        "4222222222222",  # 13 digits
    ],
)
def test_card_numbers_that_pass_luhn_are_redacted(redactor: BodyRedactor, number: str) -> None:
    out, rules = redact(redactor, f"card: {number}.")
    assert rules == {"card_number": 1}
    assert out == "card: [REDACTED:card_number]."


@pytest.mark.parametrize(
    "text",
    [
        "card: 4111 1111 1111 1112",  # Luhn fails
        "ref 1234567890123",  # 13 digits, Luhn fails
        "id 41111111111111111111111",  # 23 digits: too long
        "tx call_4111111111111111",  # glued to a word (a tool-call id)
        "e = 2.7182818284590452353",  # decimal digits
    ],
)
def test_card_false_positives_avoided(redactor: BodyRedactor, text: str) -> None:
    assert redact(redactor, text) == (text, {})


def test_card_followed_by_more_digits_is_found_on_its_leading_groups(
    redactor: BodyRedactor,
) -> None:
    out, rules = redact(redactor, "4111 1111 1111 1111 12 26 cvv")
    assert rules == {"card_number": 1}
    assert out == "[REDACTED:card_number] 12 26 cvv"


@pytest.mark.parametrize(
    ("digits", "valid"),
    [
        ("79927398713", True),  # the classic Luhn example
        ("79927398710", False),
        ("4111111111111111", True),
        ("4111111111111112", False),
        ("0", True),
        ("", False),
        ("12a4", False),
    ],
)
def test_luhn(digits: str, valid: bool) -> None:
    assert luhn_valid(digits) is valid


@pytest.mark.parametrize(
    "text",
    [
        f"key {CANARY_KEY} here",
        "Authorization: Bearer abcdefghijklmnop",
        "AKIAIOSFODNN7EXAMPLE",
    ],
)
def test_secret_keys_reuse_the_core_secret_rules(redactor: BodyRedactor, text: str) -> None:
    out, rules = redact(redactor, text)
    assert rules == {"secret_key": 1}
    assert "[REDACTED:secret_key]" in out


def test_a_sensitive_header_pair_is_redacted_once_by_the_secret_field_rule(
    redactor: BodyRedactor,
) -> None:
    out, rules = redact(redactor, '{"x-api-key": "whatever-value"}')
    assert rules == {"secret_field": 1}  # the secret_key header-pair rule does not count it again
    assert out == '{"x-api-key": "[REDACTED:secret_field]"}'
    no_fields = BodyRedactor(BodyRedactionSettings(rules=("secret_key",)))
    out, rules = redact(no_fields, '{"x-api-key": "whatever-value"}')
    assert rules == {"secret_key": 1}


def test_card_is_not_eaten_by_the_phone_rule(redactor: BodyRedactor) -> None:
    out, rules = redact(redactor, "4111 1111 1111 1111 and +1 415 555 2671")
    assert rules == {"card_number": 1, "phone": 1}
    assert out == "[REDACTED:card_number] and [REDACTED:phone]"


def test_rules_can_be_chosen_and_extended() -> None:
    r = BodyRedactor(
        BodyRedactionSettings(rules=("email",), extra_patterns={"ticket": r"TCK-\d{6}"})
    )
    hits = RedactionHits()
    out = r.redact_text(f"{CANARY_EMAIL} 555-123-4567 TCK-123456", "t", hits)
    assert out == "[REDACTED:email] 555-123-4567 [REDACTED:ticket]"
    assert hits.by_rule() == {"email": 1, "ticket": 1}
    assert r.rule_names == ("email", "ticket")


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        (BodyRedactionSettings(rules=("email", "ssn")), "body_redaction.rules"),
        (BodyRedactionSettings(extra_patterns={"bad": "("}), "body_redaction.extra_patterns.bad"),
        (
            BodyRedactionSettings(extra_patterns={"empty": "x*"}),
            "body_redaction.extra_patterns.empty",
        ),
    ],
)
def test_bad_settings_are_config_errors(settings: BodyRedactionSettings, field: str) -> None:
    with pytest.raises(ConfigError) as info:
        BodyRedactor(settings)
    assert info.value.field == field


def chat_body() -> dict[str, object]:
    return {
        "model": "m-555-123-4567",  # a model name is left alone
        "messages": [
            {"role": "system", "content": "You are helpful."},
            {"role": "user", "content": f"My mail is {CANARY_EMAIL}, call 555-123-4567"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "card 4111 1111 1111 1111"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBOR"}},
                ],
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {
                            "name": "lookup",
                            "arguments": orjson.dumps({"email": CANARY_EMAIL}).decode(),
                        },
                    }
                ],
            },
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "lookup",
                    "description": "Contact support@example.com for access",
                    "parameters": {"type": "object"},
                },
            }
        ],
        "user": CANARY_KEY,
        "temperature": 0.7,
    }


def test_request_body_is_redacted_with_locations_never_values(redactor: BodyRedactor) -> None:
    body = orjson.dumps(chat_body()).decode()
    hits = RedactionHits()
    out = redactor.redact_request_body(body, hits)
    assert CANARY_EMAIL not in out
    assert CANARY_KEY not in out
    assert "4111 1111 1111 1111" not in out
    assert "555-123-4567" in out  # only inside the model name
    parsed = orjson.loads(out)
    assert parsed["model"] == "m-555-123-4567"
    # a schema keeps its structure; personal data in it is redacted like anywhere else
    tools = orjson.loads(orjson.dumps(chat_body()["tools"]))
    tools[0]["function"]["description"] = "Contact [REDACTED:email] for access"
    assert parsed["tools"] == tools
    assert parsed["temperature"] == 0.7
    args = orjson.loads(parsed["messages"][3]["tool_calls"][0]["function"]["arguments"])
    assert args == {"email": "[REDACTED:email]"}  # arguments stay valid JSON
    assert {(h.rule, h.location, h.count) for h in hits.to_hits()} == {
        ("email", "request.messages[1].content", 1),
        ("phone", "request.messages[1].content", 1),
        ("card_number", "request.messages[2].content[0].text", 1),
        ("email", "request.messages[3].tool_calls[0].function.arguments", 1),
        ("email", "request.tools[0].function.description", 1),
        ("secret_key", "request.user", 1),
    }
    report = orjson.dumps([h.model_dump() for h in hits.to_hits()])
    assert b"jane" not in report
    assert b"canary" not in report
    assert out == orjson.dumps(parsed).decode()  # compact re-serialization


def test_untouched_body_is_kept_byte_for_byte(redactor: BodyRedactor) -> None:
    body = '{ "model": "m",\n  "messages": [{"role": "user", "content": "hi"}], "top_p": 1.0 }'
    hits = RedactionHits()
    assert redactor.redact_request_body(body, hits) == body
    assert not hits


@pytest.mark.parametrize(
    ("prompt", "location"),
    [
        (f"Write to {CANARY_EMAIL}", "request.prompt"),
        (["hello", f"Write to {CANARY_EMAIL}"], "request.prompt[1]"),
    ],
)
def test_completions_prompt_is_redacted(
    redactor: BodyRedactor, prompt: object, location: str
) -> None:
    hits = RedactionHits()
    out = redactor.redact_request_body(
        orjson.dumps({"model": "m", "prompt": prompt}).decode(), hits
    )
    assert CANARY_EMAIL not in out
    assert [(h.rule, h.location) for h in hits.to_hits()] == [("email", location)]


def test_a_body_that_is_not_json_is_scrubbed_as_text(redactor: BodyRedactor) -> None:
    hits = RedactionHits()
    out = redactor.redact_request_body(f"Mail {CANARY_EMAIL}, key {CANARY_KEY}", hits)
    assert CANARY_EMAIL not in out
    assert CANARY_KEY not in out
    assert {h.location for h in hits.to_hits()} == {"request.body"}
    form = RedactionHits()  # a form-encoded body is redacted per field
    out = redactor.redact_request_body(f"to={CANARY_EMAIL}&k={CANARY_KEY}", form)
    assert CANARY_EMAIL not in out
    assert CANARY_KEY not in out
    assert {h.location for h in form.to_hits()} == {"request.form.to", "request.form.k"}


def test_large_unstructured_strings_are_scanned_in_linear_time(redactor: BodyRedactor) -> None:
    # a base64 image in a content part: one 2 MB "word" must not make any rule quadratic
    blob = "iVBORw0KGgoAAAANSUhEUgAA" * (2_000_000 // 24)
    started = time.perf_counter()
    hits = RedactionHits()
    assert redactor.redact_text(blob, "x", hits) == blob
    # a bound on a hang, not a speed check: linear takes well under a second, a quadratic
    # rule on 2 MB would take hours
    assert time.perf_counter() - started < 30.0


SECRET_VALUE = "hunter2-canary-5c1d"
"""A secret that looks like nothing: only its key says it is one."""


@pytest.mark.parametrize(
    ("key", "secret"),
    [
        ("api_key", True),
        ("OPENAI_API_KEY", True),
        ("apiKey", True),
        ("x-api-key", True),
        ("client_secret", True),
        ("db_password", True),
        ("access_token", True),
        ("idToken", True),
        ("Authorization", True),
        ("max_tokens", False),
        ("max_completion_tokens", False),
        ("tokenizer", False),
        ("key", False),
        ("author", False),
    ],
)
def test_secret_field_names_match_as_word_sequences(key: str, secret: bool) -> None:
    matcher = SecretFieldMatcher(BodyRedactionSettings().secret_fields)
    assert matcher(key) is secret


def test_secret_named_fields_are_redacted_at_any_depth_and_in_json_text(
    redactor: BodyRedactor,
) -> None:
    arguments = orjson.dumps({"to": "x", "password": SECRET_VALUE}).decode()
    body = {
        "model": "m",
        "api_key": SECRET_VALUE,
        "max_tokens": 64,
        "metadata": {"db": {"password": SECRET_VALUE, "port": 5432}},
        "messages": [
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "tool_calls": [
                    {"type": "function", "function": {"name": "f", "arguments": arguments}}
                ],
            },
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "login",
                    "description": "Log in; questions to ops.canary@example.com",
                    "parameters": {
                        "type": "object",
                        "properties": {"password": {"type": "string"}},
                        "required": ["password"],
                    },
                },
            }
        ],
    }
    hits = RedactionHits()
    out = redactor.redact_request_body(orjson.dumps(body).decode(), hits)
    assert SECRET_VALUE not in out
    assert "ops.canary@example.com" not in out
    parsed = orjson.loads(out)
    assert parsed["api_key"] == "[REDACTED:secret_field]"
    assert parsed["max_tokens"] == 64
    assert parsed["metadata"]["db"] == {"password": "[REDACTED:secret_field]", "port": 5432}
    args = orjson.loads(parsed["messages"][1]["tool_calls"][0]["function"]["arguments"])
    assert args == {"to": "x", "password": "[REDACTED:secret_field]"}  # still valid JSON
    # the schema's structure is kept: "password" there names a property, its value is a schema
    schema = orjson.loads(orjson.dumps(body["tools"]))[0]["function"]["parameters"]
    assert parsed["tools"][0]["function"]["parameters"] == schema
    assert {(h.rule, h.location) for h in hits.to_hits()} == {
        ("secret_field", "request.api_key"),
        ("secret_field", "request.metadata.db.password"),
        ("secret_field", "request.messages[1].tool_calls[0].function.arguments"),
        ("email", "request.tools[0].function.description"),
    }


def test_an_escaped_secret_pair_inside_a_raw_body_is_redacted(redactor: BodyRedactor) -> None:
    raw = orjson.dumps(
        {
            "choices": [
                {
                    "message": {
                        "tool_calls": [
                            {
                                "function": {
                                    "arguments": orjson.dumps({"token": SECRET_VALUE}).decode()
                                }
                            }
                        ]
                    }
                }
            ]
        }
    ).decode()
    out, rules = redact(redactor, raw)
    assert SECRET_VALUE not in out
    assert rules == {"secret_field": 1}
    assert orjson.loads(
        orjson.loads(out)["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]
    ) == {"token": "[REDACTED:secret_field]"}


def test_secret_field_names_are_configurable_and_checked() -> None:
    custom = BodyRedactor(BodyRedactionSettings(secret_fields=("pin",)))
    hits = RedactionHits()
    out = custom.redact_request_body('{"card_pin": "1234", "password": "kept"}', hits)
    assert orjson.loads(out) == {"card_pin": "[REDACTED:secret_field]", "password": "kept"}
    with pytest.raises(ConfigError) as err:
        BodyRedactor(BodyRedactionSettings(secret_fields=("--",)))
    assert err.value.field == "body_redaction.secret_fields"
    assert err.value.value == "--"


def test_a_secret_named_key_redacts_lists_and_schema_example_values(
    redactor: BodyRedactor,
) -> None:
    body = {
        "nested": {"api_key": [SECRET_VALUE, ["x" + SECRET_VALUE]], "tokens": 3},
        "api_key_count": 2,
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "login",
                    "parameters": {
                        "type": "object",
                        "properties": {
                            "password": {
                                "type": "string",
                                "description": "the user's password",
                                "default": SECRET_VALUE,
                                "examples": [SECRET_VALUE],
                            }
                        },
                    },
                },
            }
        ],
    }
    hits = RedactionHits()
    out = redactor.redact_request_body(orjson.dumps(body).decode(), hits)
    assert SECRET_VALUE not in out
    parsed = orjson.loads(out)
    token = "[REDACTED:secret_field]"
    assert parsed["nested"] == {"api_key": [token, [token]], "tokens": 3}
    assert parsed["api_key_count"] == 2  # a number under a secret-looking name is kept
    prop = parsed["tools"][0]["function"]["parameters"]["properties"]["password"]
    assert prop == {
        "type": "string",
        "description": "the user's password",
        "default": token,
        "examples": [token],
    }


def test_a_form_encoded_body_is_redacted_per_field(redactor: BodyRedactor) -> None:
    hits = RedactionHits()
    body = f"model=m&api_key={SECRET_VALUE}&password={SECRET_VALUE}&note=mail+jane%40example.com"
    out = redactor.redact_request_body(body, hits)
    assert SECRET_VALUE not in out
    assert "jane" not in out
    assert out.startswith("model=m&api_key=%5BREDACTED%3Asecret_field%5D")
    assert {(h.rule, h.location) for h in hits.to_hits()} == {
        ("secret_field", "request.form.api_key"),
        ("secret_field", "request.form.password"),
        ("email", "request.form.note"),
    }
    untouched = "a=1&b=two"
    assert redactor.redact_request_body(untouched, RedactionHits()) == untouched
