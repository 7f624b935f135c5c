"""Judge settings: sending pairs is off by default; the judge has its own key; bad URLs; the
response format is part of the identity."""

from __future__ import annotations

import pytest

from shadoweval.application.judging import (
    check_judge_settings,
    describe_identity_change,
    judge_identity,
)
from shadoweval.config import JudgeSettings, load_settings
from shadoweval.errors import ConfigError
from shadoweval.judge import (
    PROMPT_SHA256,
    PROMPT_SHA256_BY_FORMAT,
    chat_completions_url,
    public_endpoint,
)


def test_sending_pairs_is_never_a_default() -> None:
    settings = JudgeSettings(url="http://judge:8000", model="m")
    assert settings.send_pairs is False
    with pytest.raises(ConfigError, match="SHADOWEVAL_JUDGE__SEND_PAIRS=true") as info:
        check_judge_settings(settings)
    assert "to http://judge:8000" in str(info.value)
    check_judge_settings(settings, send_pairs=True)
    check_judge_settings(settings.model_copy(update={"send_pairs": True}))


def test_environment_variables_and_the_judges_own_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHADOWEVAL_JUDGE__URL", "https://user:pw@judge.example/v1?x=1")
    monkeypatch.setenv("SHADOWEVAL_JUDGE__MODEL", "judge-70b")
    monkeypatch.setenv("SHADOWEVAL_JUDGE__API_KEY", "jk-1")
    monkeypatch.setenv("SHADOWEVAL_JUDGE__SEND_PAIRS", "true")
    monkeypatch.setenv("SHADOWEVAL_JUDGE__SEED", "5")
    settings = load_settings({"replay": {"concurrency": 3}})  # overrides keep the secret
    assert settings.judge.api_key is not None
    assert settings.judge.api_key.get_secret_value() == "jk-1"
    assert settings.judge.send_pairs is True
    identity = judge_identity(settings.judge)
    assert identity.endpoint == "https://judge.example/v1"  # no credentials, no query
    assert identity.model == "judge-70b"
    assert identity.prompt_sha256 == PROMPT_SHA256
    assert (identity.temperature, identity.max_tokens, identity.seed) == (0.0, 512, 5)


def test_bad_settings_name_the_field(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHADOWEVAL_JUDGE__URL", "judge:8000")
    with pytest.raises(ConfigError, match=r"judge\.url = 'judge:8000'"):
        load_settings()
    monkeypatch.delenv("SHADOWEVAL_JUDGE__URL")
    monkeypatch.setenv("SHADOWEVAL_JUDGE__SEND_PAIR", "true")
    with pytest.raises(ConfigError, match="did you mean 'send_pairs'"):
        load_settings()
    with pytest.raises(ConfigError, match="set SHADOWEVAL_JUDGE__MODEL"):
        check_judge_settings(JudgeSettings(url="http://j:1"), send_pairs=True)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://judge:8000", "http://judge:8000/v1/chat/completions"),
        ("http://judge:8000/", "http://judge:8000/v1/chat/completions"),
        ("https://api.example.com/v1", "https://api.example.com/v1/chat/completions"),
        ("https://h/openai/v1/chat/completions", "https://h/openai/v1/chat/completions"),
    ],
)
def test_chat_completions_url(url: str, expected: str) -> None:
    assert chat_completions_url(url) == expected


def test_public_endpoint_drops_credentials() -> None:
    assert public_endpoint("http://u:p@[::1]:9000/v1/?k=s#f") == "http://[::1]:9000/v1"


def test_the_response_format_setting_enters_the_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    """``SHADOWEVAL_JUDGE__RESPONSE_FORMAT`` picks the prompt, so the frozen identity's
    prompt hash differs between formats; everything else is the same judge."""
    assert JudgeSettings().response_format == "text"
    monkeypatch.setenv("SHADOWEVAL_JUDGE__URL", "http://judge:8000/v1")
    monkeypatch.setenv("SHADOWEVAL_JUDGE__MODEL", "judge-8b")
    identities = {}
    for fmt in ("text", "json_schema", "json_object"):
        monkeypatch.setenv("SHADOWEVAL_JUDGE__RESPONSE_FORMAT", fmt)
        settings = load_settings()
        assert settings.judge.response_format == fmt
        identities[fmt] = judge_identity(settings.judge)
    assert identities["text"].prompt_sha256 == PROMPT_SHA256
    assert {fmt: i.prompt_sha256 for fmt, i in identities.items()} == PROMPT_SHA256_BY_FORMAT
    assert len({i.prompt_sha256 for i in identities.values()}) == 3
    change = describe_identity_change(identities["text"], identities["json_schema"])
    assert change == (
        f"prompt_sha256 {PROMPT_SHA256[:12]} (text answers) → "
        f"{PROMPT_SHA256_BY_FORMAT['json_schema'][:12]} (json_schema answers)"
    )
    monkeypatch.setenv("SHADOWEVAL_JUDGE__RESPONSE_FORMAT", "json")
    with pytest.raises(ConfigError, match=r"judge\.response_format = 'json'"):
        load_settings()
