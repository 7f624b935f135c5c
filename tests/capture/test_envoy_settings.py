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


def test_live_port_limits_are_the_sidecars_settings() -> None:
    settings = envoy_settings(
        CaptureOverrides(upstream="http://127.0.0.1:8000"), EnvoyOverrides(ext_proc_port=7000)
    )
    capture = settings.capture.model_copy(
        update={
            "header_read_timeout_s": 7.0,
            "body_read_timeout_s": 20.0,
            "client_keepalive_timeout_s": 50.0,
            "max_request_header_bytes": 32 * 1024,
        }
    )
    doc = yaml.safe_load(envoy_config_text(settings.model_copy(update={"capture": capture})))
    listener = doc["static_resources"]["listeners"][0]
    hcm = listener["filter_chains"][0]["filters"][0]["typed_config"]
    assert hcm["request_headers_timeout"] == "7s"
    assert hcm["request_timeout"] == "27s"
    assert hcm["common_http_protocol_options"]["idle_timeout"] == "50s"
    # the header count never binds before the bytes do (a header is at least 5 bytes,
    # "a:" and CRLF, as the sidecar counts): Envoy's default of 100 would
    assert hcm["common_http_protocol_options"]["max_headers_count"] == 32 * 1024 // 5
    assert hcm["max_request_headers_kb"] == 32
    # a connection that sends nothing is closed after header_read_timeout_s, not after
    # the keep-alive idle timeout
    assert listener["listener_filters_timeout"] == "7s"
    assert listener["continue_on_listener_filters_timeout"] is False
    assert [f["name"] for f in listener["listener_filters"]] == [
        "envoy.filters.listener.http_inspector"
    ]
