"""Settings of the Envoy front end: environment, command-line overrides, clear errors."""

from __future__ import annotations

import pytest
import yaml

from shadoweval.application.capture import CaptureOverrides
from shadoweval.application.envoy_front import EnvoyOverrides, envoy_config_text, envoy_settings
from shadoweval.errors import ConfigError


def test_environment_and_overrides_reach_the_rendered_config(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SHADOWEVAL_ENVOY__DEFERRED_CLOSE_TIMEOUT_S", "2.5")
    monkeypatch.setenv("SHADOWEVAL_CAPTURE__ROUTES", '["/v1/responses"]')
    settings = envoy_settings(
        CaptureOverrides(upstream="http://127.0.0.1:8000", port=9000),
        EnvoyOverrides(ext_proc_port=7000, admin_port=7001),
    )
    assert settings.envoy.deferred_close_timeout_s == 2.5
    assert (settings.envoy.ext_proc_port, settings.envoy.admin_port) == (7000, 7001)
    doc = yaml.safe_load(envoy_config_text(settings))
    listener = doc["static_resources"]["listeners"][0]
    assert listener["address"]["socket_address"]["port_value"] == 9000
    hcm = listener["filter_chains"][0]["filters"][0]["typed_config"]
    ext = next(f for f in hcm["http_filters"] if f["name"] == "envoy.filters.http.ext_proc")[
        "typed_config"
    ]
    assert ext["deferred_close_timeout"] == "2.500s"
    paths = [r["match"].get("path") for r in hcm["route_config"]["virtual_hosts"][0]["routes"]]
    assert "/v1/responses" in paths


def test_a_bad_override_names_the_field() -> None:
    with pytest.raises(ConfigError) as info:
        envoy_settings(
            CaptureOverrides(upstream="http://127.0.0.1:8000"), EnvoyOverrides(concurrency=0)
        )
    assert info.value.field == "envoy.concurrency"


def test_a_typo_in_the_environment_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHADOWEVAL_ENVOY__ADMIN_PROT", "9902")
    with pytest.raises(ConfigError, match="ADMIN_PROT"):
        envoy_settings(CaptureOverrides(upstream="http://127.0.0.1:8000"), EnvoyOverrides())


def test_config_needs_a_fixed_grpc_port() -> None:
    settings = envoy_settings(
        CaptureOverrides(upstream="http://127.0.0.1:8000"), EnvoyOverrides(ext_proc_port=0)
    )
    with pytest.raises(ConfigError) as info:
        envoy_config_text(settings)
    assert info.value.field == "envoy.ext_proc_port"
