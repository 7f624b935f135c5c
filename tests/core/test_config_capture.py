"""Capture and environment settings fail early with the field and the value."""

from __future__ import annotations

import pytest

from shadoweval.config import CaptureSettings, check_environment, load_settings
from shadoweval.errors import ConfigError


def test_typo_in_an_environment_variable_is_refused_with_a_hint() -> None:
    with pytest.raises(ConfigError, match="did you mean 'sample_percent'") as info:
        check_environment({"SHADOWEVAL_CAPTURE__SAMPEL_PERCENT": "10"})
    assert info.value.field == "SHADOWEVAL_CAPTURE__SAMPEL_PERCENT"
    check_environment(
        {
            "SHADOWEVAL_CAPTURE__SAMPLE_PERCENT": "10",
            "SHADOWEVAL_CAPTURE__SPOOL__DIRECTORY": "/tmp/x",
            "SHADOWEVAL_API__TOKEN": "t" * 20,
            "SHADOWEVAL_TEST_DATABASE_URL": "sqlite://",
            "OTHER": "1",
        }
    )


@pytest.mark.parametrize("url", ["ftp://x", "localhost:18000", "http://"])
def test_upstream_must_be_an_http_url(url: str) -> None:
    with pytest.raises(ConfigError, match="upstream_url") as info:
        load_settings({"capture": {"upstream_url": url}})
    assert info.value.value == url


def test_admin_port_must_differ_from_the_proxy_port() -> None:
    with pytest.raises(ConfigError, match="admin_port are both 8080") as info:
        load_settings({"capture": {"port": 8080, "admin_port": 8080}})
    # A check across two fields names them, not the whole section's values.
    assert str(info.value) == (
        "capture: port and admin_port are both 8080: the admin endpoints need their own"
    )
    assert CaptureSettings(port=0, admin_port=0).port == 0  # ephemeral ports are fine


def test_a_plain_value_for_a_list_setting_explains_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHADOWEVAL_CAPTURE__SINKS", "kafka")
    with pytest.raises(ConfigError, match="JSON"):
        load_settings()
